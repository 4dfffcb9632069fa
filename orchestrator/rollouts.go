package orchestrator

import (
	"context"
	"slices"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
)

// Rollouts rolls out single trajectories against a recipe's policy
// replicas and retriever outside a training run, as a run's rollouts do
// (the same turns, tokenization and search spans), with nothing recorded:
// for benchmarks and tools.
type Rollouts struct{ rl *roller }

// NewRollouts builds the rollout engine of r over deps (it needs the local
// tokenizer, deps.Tokenizer).
func NewRollouts(r *recipes.Recipe, deps roles.Deps) (*Rollouts, error) {
	rl, err := newRoller(r, deps, nil)
	if err != nil {
		return nil, err
	}
	return &Rollouts{rl: rl}, nil
}

// Prompt returns the ids of question's Search-R1 prompt under the chat
// template (tokenized on a policy replica or locally, as
// policy.tokenize says); set them as a trajectory's PromptIDs.
func (x *Rollouts) Prompt(ctx context.Context, question string) ([]int, error) {
	return x.rl.promptIDs(ctx, question, "")
}

// Rollout rolls out t (its Question and PromptIDs set) on model with
// sampling sp and seed, filling its turns, tokens and logprobs; t is not
// scored.
func (x *Rollouts) Rollout(ctx context.Context, t *Trajectory, model string, sp policy.Sampling, seed int64) error {
	return x.rl.rollout(ctx, t, model, sp, seed)
}

// RolloutStats describes the rollouts of a finished run's last step.
type RolloutStats struct {
	// Finished holds the seconds, from the step's start, at which each of
	// its trajectories finished, in ascending order.
	Finished []float64
	// Searches and RetrieverCalls count the step's searches and the
	// /retrieve calls they were coalesced into, under the async schedule
	// with batching (retriever.batch_window_ms); both 0 otherwise.
	Searches, RetrieverCalls int64
}

// LastRollouts returns the rollout statistics of the last step of the
// run Run made (zero before Run, or when no step finished).
func (rn *Runner) LastRollouts() RolloutStats {
	var st RolloutStats
	ru := rn.last
	if ru == nil {
		return st
	}
	for _, t := range ru.lastTrajs {
		st.Finished = append(st.Finished, t.done.Sub(ru.lastStart).Seconds())
	}
	slices.Sort(st.Finished)
	if b := ru.roller.batch; b != nil && ru.r.Rollout.Schedule == recipes.ScheduleAsync {
		st.Searches, st.RetrieverCalls = b.queries.Load(), b.calls.Load()
	}
	return st
}
