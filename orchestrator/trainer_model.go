package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hindsearch/hindsearch/clients/trainer"
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

// createModel opens the run's trainer session and creates the run's model
// on it (create_model with trainer.base_model, trainer.lora_rank and the
// seed), recorded in trainer_model.json. The model of the run this
// directory held before (interrupted, even by SIGKILL before its first
// saved state, or replaced by --overwrite) may still hold the trainer
// (SkyRL's FSDP backend holds one): it is released first; unknown or no
// longer loaded is fine. The caller closes the session and unloads the
// model (unloadModel) however the run ends.
func (ru *run) createModel(ctx context.Context) (*trainer.Session, error) {
	r := ru.r
	sess, err := ru.trainer.StartSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("trainer session: %w", err)
	}
	var prior []string
	if ru.resumed != nil && ru.resumed.ModelID != "" {
		prior = append(prior, ru.resumed.ModelID)
	}
	if ru.prior != "" && !slices.Contains(prior, ru.prior) {
		prior = append(prior, ru.prior)
	}
	for _, id := range prior {
		if err := ru.trainer.UnloadModel(ctx, id); err != nil {
			fmt.Fprintf(ru.Out, "warning: trainer unload_model %s (the earlier run's model in %s): %v\n", id, ru.dir.Path, err)
		}
	}
	ru.modelID, err = ru.trainer.CreateModel(ctx, sess, r.Trainer.BaseModel, r.Trainer.LoRARank, r.Seed)
	if err != nil {
		sess.Close()
		return nil, ru.createModelError(err)
	}
	if err := writeTrainerModel(ru.dir, ru.modelID, ru.Deps.Trainer.URL()); err != nil {
		ru.unloadModel(ctx)
		sess.Close()
		return nil, err
	}
	return sess, nil
}
