package orchestrator

import (
	"context"
	"fmt"
)

// syncWeights runs step 7 of DESIGN §2 for a trained step: the trainer
// saves the new weights for sampling (save_weights_for_sampler, recorded in
// the retention ledger first), the policy replicas load them (sync.kind),
// and the run samples from them from now on. Sampler archives that no
// resume point and no later step needs are deleted. It returns the name
// the replicas serve the weights under.
func (ru *run) syncWeights(ctx context.Context, c *collected) (string, error) {
	name := reUnsafe.ReplaceAllString(ru.r.Name, "_") + fmt.Sprintf("-step%04d", c.step)
	done := c.clock.Start("sync")
	if err := ru.ret.add(trainerCheckpoint{ModelID: ru.modelID, ID: "sampler_weights/" + name, Step: c.step}); err != nil {
		done()
		return "", err
	}
	path, err := ru.trainer.SaveWeightsForSampler(ctx, ru.modelID, name)
	if err != nil {
		done()
		return "", fmt.Errorf("save_weights_for_sampler: %w", err)
	}
	ru.syncMu.Lock()
	err = ru.sync.Apply(ctx, path, name)
	ru.syncMu.Unlock()
	done()
	if err != nil {
		return "", err
	}
	ru.mu.Lock()
	ru.adapter = name
	ru.adapters[c.step] = name
	ru.samplers[name] = path
	ru.lastStep = c.step
	ru.mu.Unlock()
	ru.pruneTrainer(ctx)
	return name, nil
}

// ensure makes the replicas that are up hold model, under syncMu (see
// fleet.Sync.Ensure). When they all do already it returns at once, without
// waiting for a sync in progress (off-policy rollouts overlap the sync of
// the step before).
func (ru *run) ensure(ctx context.Context, model string) error {
	if ru.rollouts.Replicas.AllHold(model) {
		return nil
	}
	ru.syncMu.Lock()
	defer ru.syncMu.Unlock()
	return ru.sync.Ensure(ctx, model)
}
