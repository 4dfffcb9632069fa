package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/hindsearch/hindsearch/orchestrator/tracking"
	"regexp"
	"time"
)

// state is the run's resume point (state.json).
type state struct {
	Step      int    `json:"step"`
	Adapter   string `json:"adapter"`
	ModelID   string `json:"model_id"`
	Cursor    int    `json:"cursor"`
	Simulated bool   `json:"simulated"`
	Updated   string `json:"updated"`
	// TrainerState is the trainer's saved full state (save_weights) after
	// Step, from which a resumed run continues.
	TrainerState string `json:"trainer_state"`
	// Adapters maps a step to the adapter carrying its weights, and
	// Samplers an adapter to its sampler path, for the adapters a resumed
	// run must serve again.
	Adapters map[int]string    `json:"adapters"`
	Samplers map[string]string `json:"samplers"`
	// Tracking are the trackers' run ids (a W&B run id, an MLflow run):
	// a resumed run continues the same runs.
	Tracking tracking.IDs `json:"tracking,omitzero"`
}

// checkpoint saves the trainer's full state after step and then writes
// state.json, the resume point: a crash before it resumes from the step
// before.
func (ru *run) checkpoint(ctx context.Context, step int, adapter string) error {
	name := reUnsafe.ReplaceAllString(ru.r.Name, "_") + fmt.Sprintf("-state%04d", step)
	if err := ru.ret.add(trainerCheckpoint{ModelID: ru.modelID, ID: "weights/" + name, Step: step}); err != nil {
		return err
	}
	path, err := ru.trainer.SaveState(ctx, ru.modelID, name)
	if err != nil {
		return fmt.Errorf("save_weights: %w", err)
	}
	ru.mu.Lock()
	// Every step draws exactly batch_size questions; the cursor after step
	// is not ru.cursor, which a collection started ahead may have moved.
	st := state{Step: step, Adapter: adapter, ModelID: ru.modelID, Cursor: step * ru.r.Train.BatchSize, Simulated: ru.sim,
		Updated: time.Now().UTC().Format(time.RFC3339), TrainerState: path,
		Adapters: map[int]string{}, Samplers: map[string]string{}, Tracking: ru.track.IDs()}
	// The adapters a later step may still sample from (off-policy) or
	// serve: the newest k+1.
	for v, n := range ru.adapters {
		if v >= step-ru.r.Train.MaxOffPolicySteps {
			st.Adapters[v] = n
			st.Samplers[n] = ru.samplers[n]
		}
	}
	ru.mu.Unlock()
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := ru.dir.WriteFileAtomic("state.json", append(b, '\n')); err != nil {
		return err
	}
	// The new state is complete: the states beyond checkpoint.keep, and
	// the sampler archives only the old resume point needed, go.
	ru.mu.Lock()
	ru.lastState = &st
	ru.mu.Unlock()
	if err := ru.ret.complete(ru.modelID, "weights/"+name, step); err != nil {
		return err
	}
	ru.pruneTrainer(ctx)
	return nil
}

// reUnsafe matches what may not stand in a trainer checkpoint's name
// (SkyRL's ID_PATTERN allows letters, digits, '_' and '-'): the recipe's
// name is cleaned with it before "-stepNNNN" or "-stateNNNN" is added.
var reUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
