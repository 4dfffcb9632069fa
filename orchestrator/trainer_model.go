package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// unloadTimeout bounds the unload_model a run sends as it ends.
const unloadTimeout = 5 * time.Minute

// unloadModel releases the run's model on the trainer on a context of its
// own (ctx may be cancelled: an interrupted run releases it too); a
// failure is reported, since it is not the run's.
func (ru *run) unloadModel(ctx context.Context) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unloadTimeout)
	defer cancel()
	if err := ru.Deps.Trainer.UnloadModel(uctx, ru.modelID); err != nil {
		fmt.Fprintf(ru.Out, "warning: trainer unload_model %s: %v (the trainer keeps the model until its session has been silent for about 5 minutes)\n", ru.modelID, err)
	}
}

// createModelError explains a create_model that SkyRL refused because it
// already holds a policy model (its FSDP backend trains one at a time).
func (ru *run) createModelError(err error) error {
	msg := err.Error()
	if !strings.Contains(msg, "already has a 'policy' model") && !strings.Contains(msg, "Cannot register an additional LoRA adapter") &&
		!strings.Contains(msg, "register_adapter is not implemented") {
		return fmt.Errorf("trainer create_model: %w", err)
	}
	return fmt.Errorf("%w\n%s already holds a policy model, so it cannot create %s at trainer.lora_rank %d (SkyRL's FSDP backend trains one model at a time): another run holds the trainer, or a run that ended without releasing its model. Wait about 5 minutes for SkyRL's stale-session cleanup (a session silent for 300 s, checked every 60 s) if that run is gone, stop the other run, or restart the trainer server; `orchestrate doctor` checks the trainer",
		err, ru.Deps.Trainer.URL(), ru.r.Trainer.BaseModel, ru.r.Trainer.LoRARank)
}
