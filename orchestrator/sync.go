package orchestrator

import (
	"context"
	"fmt"

	"github.com/hindsearch/hindsearch/orchestrator/doctor"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
)

// syncWeights runs step 7 of DESIGN §2 for a trained step: the trainer
// saves the new weights for sampling (save_weights_for_sampler, recorded in
// the retention ledger first), the policy replicas load them (sync.kind),
// and the run samples from them from now on. Sampler archives that no
// resume point and no later step needs are deleted. It returns the name
// the replicas serve the weights under.
func (ru *run) syncWeights(ctx context.Context, c *collected) (string, error) {
	name := adapterName(ru.r.Name, ru.modelID, c.step)
	done := c.clock.Start("sync")
	var path string
	var err error
	if ss, ok := ru.sync.(fleet.SessionSync); ok {
		path, err = ru.saveAndServe(ctx, ss, name, c.step)
	} else {
		path, err = ru.saveAndApply(ctx, name, c.step)
	}
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

// adapterName is the name step's weights are saved and served under:
// the recipe's name, the trainer's model id and the step
// (<recipe>-<model id>-stepNNNN, each part cleaned with reUnsafe). The
// model id keeps apart the adapters of two runs of one recipe that share
// policy servers (an ablation's variants side by side, two seeds on one
// fleet): with the recipe's name alone, each run's sync unloaded the
// other's live adapter of the same step. A resumed run serves its earlier
// adapters under the names it recorded.
func adapterName(recipe, modelID string, step int) string {
	return reUnsafe.ReplaceAllString(recipe, "_") + "-" + reUnsafe.ReplaceAllString(modelID, "_") + fmt.Sprintf("-step%04d", step)
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

// saveAndApply is the sync of the kinds that move files: a named
// save_weights_for_sampler (recorded in the retention ledger first), whose
// archive the sync kind brings to the replicas. It returns the sampler
// path.
func (ru *run) saveAndApply(ctx context.Context, name string, step int) (string, error) {
	if err := ru.ret.add(trainerCheckpoint{ModelID: ru.modelID, ID: "sampler_weights/" + name, Step: step}); err != nil {
		return "", err
	}
	path, err := ru.trainer.SaveWeightsForSampler(ctx, ru.modelID, name)
	if err != nil {
		return "", fmt.Errorf("save_weights_for_sampler: %w", err)
	}
	ru.syncMu.Lock()
	defer ru.syncMu.Unlock()
	return path, ru.sync.Apply(ctx, path, name)
}

// saveAndServe is sync.kind tinker's sync: an ephemeral
// save_weights_for_sampler of the model's current weights (its checkpoint
// recorded in the retention ledger first), whose sampling session then
// serves name. It returns the checkpoint's tinker:// path.
func (ru *run) saveAndServe(ctx context.Context, ss fleet.SessionSync, name string, step int) (string, error) {
	s, err := ru.trainer.SaveForSampling(ctx, ru.session, ru.modelID, func(id string) error {
		return ru.ret.add(trainerCheckpoint{ModelID: ru.modelID, ID: id, Step: step})
	})
	if err != nil {
		return "", fmt.Errorf("save_weights_for_sampler: %w", err)
	}
	ru.syncMu.Lock()
	ss.Serve(name, s)
	ru.syncMu.Unlock()
	return s.Path, nil
}

// serveInitial serves policy.model, the run's initial weights, under
// sync.kind tinker, as the server can (doctor.ProbeTinkerSampling):
//   - SkyRL's JAX backend (a model's checkpoints share the slot it
//     trains): from base-model sampling sessions, which a fresh LoRA
//     equals (lora_B zero). Sampling a save of the model would load it
//     into the training slot whenever it is sampled after the weights
//     moved on: an initial-policy teacher would roll the training back
//     every step (source audit B1, seen running).
//   - SkyRL's FSDP and Megatron backends (no base-model sampling) and the
//     hosted service: the sampling session of an ephemeral save of the new
//     model. With hindsight.teacher initial that name is pinned: it stays
//     served past sync.keep, instead of falling back to base-model
//     sampling (refused on FSDP, whose preflight refuses that recipe: B2).
//
// A resumed run serves its restored weights through a save
// (resumeSessions).
func (ru *run) serveInitial(ctx context.Context) error {
	ss, ok := ru.sync.(fleet.SessionSync)
	if !ok {
		return nil
	}
	kind, err := doctor.ProbeTinkerSampling(ctx, ru.r, ru.Deps.Policies[0], ru.Deps.Tokenizer)
	if err != nil {
		return fmt.Errorf("initial weights: how the Tinker server samples: %w", err)
	}
	if kind == doctor.TinkerSharedSlot {
		fmt.Fprintf(ru.Out, "sync.kind tinker on %s: %s is sampled from base-model sessions\n", kind, ru.r.Policy.Model)
		return nil
	}
	path, err := ru.saveAndServe(ctx, ss, ru.r.Policy.Model, 0)
	if err != nil {
		return fmt.Errorf("initial weights: %w", err)
	}
	if ru.teacherOnPolicyServers() || ru.r.KLOnPolicyServers() {
		ss.Pin(ru.r.Policy.Model)
	}
	ru.mu.Lock()
	ru.initialSampler = path
	ru.mu.Unlock()
	return nil
}

// resumeSessions serves a resumed run's weights under sync.kind tinker:
// the interrupted run's sampling sessions named its model, which is no
// longer loaded, so the restored weights are saved again and serve every
// kept name (the newest is the one the next on-policy step samples; with
// train.max_off_policy_steps the older ones are served the resume point's
// weights too, and the next steps' batches differ from an uninterrupted
// run's).
func (ru *run) resumeSessions(ctx context.Context, names []string) error {
	ss, ok := ru.sync.(fleet.SessionSync)
	if !ok || len(names) == 0 {
		return nil
	}
	newest := names[len(names)-1]
	path, err := ru.saveAndServe(ctx, ss, newest, ru.resumed.Step)
	if err != nil {
		return fmt.Errorf("serve the restored weights: %w", err)
	}
	ru.mu.Lock()
	ru.samplers[newest] = path
	ru.mu.Unlock()
	if len(names) > 1 && ru.r.Train.MaxOffPolicySteps > 0 {
		fmt.Fprintf(ru.Out, "warning: sync.kind tinker cannot serve the older weights %v again after a resume: they are served the resume point's weights, so the next %d steps sample differently from an uninterrupted run\n",
			names[:len(names)-1], ru.r.Train.MaxOffPolicySteps)
	}
	return nil
}
