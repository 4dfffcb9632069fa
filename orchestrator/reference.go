package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
)

// reference scores t's whole response under the initial weights, for
// trainer.kl_coef: one prefill of its prompt and response (timed as phase
// "reference") on the reference servers (reference.urls, in turn), or on
// the policy servers as policy.model, which serve the initial weights all
// run long (validation and doctor refuse the kinds that overwrite them).
// It returns a logprob for every response token.
func (ru *run) reference(ctx context.Context, t *rollout.Trajectory) ([]float64, error) {
	model := ru.r.Policy.Model
	if len(ru.Deps.References) > 0 {
		p := ru.nextReference()
		return ru.hinter.scoreResponse(ctx, p, model, t.PromptIDs, t, len(t.Tokens), t.Logprobs, "reference", "reference score on "+p.URL())
	}
	var lps []float64
	err := ru.rollouts.Replicas.CallFor(ctx, model, func(p policy.Policy) (err error) {
		lps, err = ru.hinter.scoreResponse(ctx, p, ru.rollouts.Replicas.Wire(model), t.PromptIDs, t, len(t.Tokens), t.Logprobs, "reference", "reference score")
		return err
	})
	return lps, err
}

// nextReference is the reference server the next prefill goes to, in
// turn (the KL reference and, with hindsight.teacher initial, the
// teacher).
func (ru *run) nextReference() policy.Policy {
	refs := ru.Deps.References
	return refs[int(ru.refNext.Add(1)-1)%len(refs)]
}

// optimisation says in a line how the run optimises: the optim_steps a
// step makes, the learning rate's schedule, the loss aggregation on the
// trainer's backend, the advantages' standard deviation and the KL and
// entropy terms.
func (ru *run) optimisation() string {
	r := ru.r
	total := r.Train.BatchSize * r.Train.GroupSize
	var b strings.Builder
	if n := r.OptimSteps(); n > 1 {
		fmt.Fprintf(&b, "%d optim_steps a step (mini-batches of %d of %d trajectories)", n, r.MiniBatch(), total)
	} else {
		fmt.Fprintf(&b, "1 optim_step a step (%d trajectories)", total)
	}
	fmt.Fprintf(&b, ", learning rate %g", r.Trainer.LearningRate)
	if w := r.Trainer.LRWarmupSteps; w > 0 {
		fmt.Fprintf(&b, " warmed up over %d steps (0 at step 1)", w)
	}
	fmt.Fprintf(&b, ", loss %s on %s", r.Trainer.LossAgg, ru.backend)
	if recipes.NativeAgg(r.Trainer.LossAgg, ru.backend) {
		b.WriteString(" (its own)")
	} else {
		b.WriteString(" (advantages scaled)")
	}
	fmt.Fprintf(&b, ", GRPO std %s", r.Trainer.AdvantageStd)
	if r.Trainer.KLCoef > 0 {
		ref := "policy.model on the policy servers"
		if !r.KLOnPolicyServers() {
			ref = strings.Join(r.Reference.URLs, ", ")
		}
		fmt.Fprintf(&b, ", KL %g to %s", r.Trainer.KLCoef, ref)
	}
	if r.Trainer.EntropyCoef > 0 {
		fmt.Fprintf(&b, ", entropy %g", r.Trainer.EntropyCoef)
	}
	if r.Rollout.FinalAnswerRound && r.Rollout.MaxTurns > 0 {
		fmt.Fprintf(&b, "; %d search rounds and a final answer round", r.Rollout.MaxTurns)
	}
	return b.String()
}
