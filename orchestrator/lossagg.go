package orchestrator

import (
	"fmt"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/recipes"
)

// The loss aggregation (trainer.loss_agg) is decided here and nowhere else.
//
// Every Tinker loss the program sends (importance_sampling, ppo) is linear
// in the advantages and positively homogeneous in them (PPO's clipped
// objective min(r A, clip(r) A) scales with A's positive factor), so
// multiplying datum i's advantages by s_i multiplies its per-token losses
// by s_i. A backend aggregates datum i's per-token losses l_it over a
// mini-batch (every datum between two optim_steps) with its own weight
// b_i; the recipe's aggregation asks for c_i; s_i = c_i / b_i makes the
// backend compute the recipe's. With B datums in the mini-batch, n_i
// policy tokens in datum i and N in all:
//
//	backend        b_i                 source
//	skyrl-fsdp     1                   a token sum (reduce_loss), accumulated over calls
//	hosted         1                   a token sum (Tinker's documented losses)
//	skyrl-jax      1 / (B n_i)         each datum's token mean, optim_step's mean over datums
//
//	loss_agg              c_i
//	token-mean            1 / N        (verl's default, Search-R1's)
//	seq-mean-token-mean   1 / (B n_i)
//	seq-mean-token-sum    1 / B
//	sum                   1
//
// docs/protocols.md "Search-R1's optimisation" has the table with its
// sources.

// lossScale is the factor s_i of a datum with n policy tokens in a
// mini-batch of b datums and total policy tokens: what the backend's own
// aggregation needs for the recipe's (agg) to come out.
func lossScale(agg, backend string, n, b, total int) float64 {
	if n <= 0 || b <= 0 || total <= 0 {
		return 0
	}
	var c float64
	switch agg {
	case recipes.LossAggTokenMean:
		c = 1 / float64(total)
	case recipes.LossAggSeqMeanTokenMean:
		c = 1 / (float64(b) * float64(n))
	case recipes.LossAggSeqMeanTokenSum:
		c = 1 / float64(b)
	default: // recipes.LossAggSum
		c = 1
	}
	return c / backendWeight(backend, n, b)
}

// backendWeight is b_i, the weight the backend's own aggregation gives
// each per-token loss of a datum with n policy tokens in a mini-batch of
// b datums (the table above).
func backendWeight(backend string, n, b int) float64 {
	if backend == recipes.BackendSkyRLJAX {
		return 1 / (float64(b) * float64(n))
	}
	return 1
}

// termScale is the factor by which a datum's OPD term (termPositions) is
// added to its scaled advantages under hindsight.term_agg search-mean:
// coef / (T b_i), T the mini-batch's term tokens, so that the backend's
// aggregation makes coef times the term's mean over them (L_OPD) whatever
// trainer.loss_agg does to the policy loss. 0 when the mini-batch has no
// term token.
func termScale(coef float64, backend string, n, b, termTokens int) float64 {
	if termTokens <= 0 || n <= 0 || b <= 0 {
		return 0
	}
	return coef / (float64(termTokens) * backendWeight(backend, n, b))
}

// addTerm returns d with k times term added to its advantages (d is not
// changed).
func addTerm(d trainer.Datum, term []float32, k float64) (trainer.Datum, error) {
	adv, ok := d.LossFnInputs["advantages"].Data.([]float32)
	if !ok {
		return d, fmt.Errorf("datum advantages are %T, not float32", d.LossFnInputs["advantages"].Data)
	}
	if len(term) != len(adv) {
		return d, fmt.Errorf("datum of %d positions, OPD term of %d", len(adv), len(term))
	}
	sum := make([]float32, len(adv))
	for i, a := range adv {
		sum[i] = float32(float64(a) + k*float64(term[i]))
	}
	return withAdvantages(d, sum), nil
}

// scaleDatum returns d with its advantages multiplied by s (d is not
// changed); s 1 returns d itself.
func scaleDatum(d trainer.Datum, s float64) (trainer.Datum, error) {
	if s == 1 {
		return d, nil
	}
	adv, ok := d.LossFnInputs["advantages"].Data.([]float32)
	if !ok {
		return d, fmt.Errorf("datum advantages are %T, not float32", d.LossFnInputs["advantages"].Data)
	}
	scaled := make([]float32, len(adv))
	for i, a := range adv {
		scaled[i] = float32(float64(a) * s)
	}
	return withAdvantages(d, scaled), nil
}

// withAdvantages returns d with adv as its advantages, its other loss
// inputs shared (d is not changed).
func withAdvantages(d trainer.Datum, adv []float32) trainer.Datum {
	in := make(map[string]trainer.TensorData, len(d.LossFnInputs))
	for k, v := range d.LossFnInputs {
		in[k] = v
	}
	in["advantages"] = trainer.Float32Tensor(adv)
	d.LossFnInputs = in
	return d
}

// learningRate is step's scheduled learning rate (trainer.lr_warmup_steps):
// verl's constant schedule with linear warmup, stepped once per training
// step from 0 (torch_functional.py get_constant_schedule_with_warmup), so
// step s trains at lr * min(1, (s-1)/warmup), every optim_step of the step
// alike.
func learningRate(r *recipes.Recipe, step int) float64 {
	w := r.Trainer.LRWarmupSteps
	if w <= 0 || step-1 >= w {
		return r.Trainer.LearningRate
	}
	return r.Trainer.LearningRate * float64(step-1) / float64(w)
}
