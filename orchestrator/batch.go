package orchestrator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"sort"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/recipes"
)

// advantageEps is the epsilon of the GRPO normalisation.
const advantageEps = 1e-6

// GroupAdvantages returns the GRPO advantages (r - mean) / (std + eps) of a
// group's rewards: with unbiased the standard deviation over n-1 (torch.std,
// as verl computes it), else over n (the population's).
func GroupAdvantages(rewards []float64, unbiased bool) []float64 {
	out := make([]float64, len(rewards))
	if len(rewards) == 0 {
		return out
	}
	mean := 0.0
	for _, r := range rewards {
		mean += r
	}
	mean /= float64(len(rewards))
	v := 0.0
	for _, r := range rewards {
		v += (r - mean) * (r - mean)
	}
	n := float64(len(rewards))
	if unbiased && len(rewards) > 1 {
		n--
	}
	std := math.Sqrt(v / n)
	for i, r := range rewards {
		out[i] = (r - mean) / (std + advantageEps)
	}
	return out
}

// Terms are what a datum's per-token advantages are made of beyond the
// group advantage: its sign, the hindsight term's weight and the
// regularisers of verl's actor loss, put in as their gradients at ratio 1.
type Terms struct {
	// Sign multiplies the group advantage (-1: the advantage-sign check).
	Sign float64
	// OPDCoef weighs the trajectory's OPD term (hindsight.coef).
	OPDCoef float64
	// OPDApart leaves the OPD term out of the advantage: under
	// hindsight.term_agg search-mean it is a loss of its own, added per
	// mini-batch when the datums are scaled (termPositions, sendReady).
	OPDApart bool
	// KLCoef weighs the k3 KL to the reference logprobs (trainer.kl_coef).
	KLCoef float64
	// EntropyCoef weighs the entropy bonus (trainer.entropy_coef).
	EntropyCoef float64
	// TurnPenalty is subtracted on the policy tokens of the turns that
	// commit one of PenaltyCauses (rollout.turn_penalty and its causes;
	// rollout.Trajectory.PenaltyMask).
	TurnPenalty   float64
	PenaltyCauses []string
}

// klClamp bounds verl's low_var_kl estimate (core_algos.py kl_penalty):
// beyond it the estimate is constant and its gradient zero.
const klClamp = 10

// KLTerm is the k3 estimate of the KL from the policy to the reference at
// one sampled token, exp(ref-old) - (ref-old) - 1 (verl's low_var_kl), and
// the advantage that carries its gradient at ratio 1, -(1 - exp(ref-old)):
// zero where verl's clamp at 10 holds the estimate constant.
func KLTerm(old, ref float64) (kl, adv float64) {
	d := ref - old
	kl = math.Exp(d) - d - 1
	if kl > klClamp {
		return klClamp, 0
	}
	return kl, -(1 - math.Exp(d))
}

// BuildDatum turns a trajectory into a Tinker datum: the model input is the
// prompt and response tokens but the last, position i predicting token i+1.
// Policy positions carry the sampling logprob, the advantage and weight 1;
// prompt and environment positions carry zeros. The advantage is the group
// advantage times Sign, plus OPDCoef times the OPD term, plus KLCoef times
// KLTerm's advantage against ref (the reference logprobs, indexed as the
// response tokens; nil: no KL term), plus EntropyCoef times the sampled
// token's surprisal (-logprob, the single-sample gradient of the entropy),
// less TurnPenalty on the tokens of the offending turns (PenaltyMask).
// It is the advantage before the loss aggregation's scaling (lossScale).
func BuildDatum(t *rollout.Trajectory, terms Terms, ref []float64) trainer.Datum {
	full := append(append([]int(nil), t.PromptIDs...), t.Tokens...)
	n := len(full) - 1
	target := make([]int64, n)
	lps := make([]float32, n)
	adv := make([]float32, n)
	w := make([]float32, n)
	p := len(t.PromptIDs)
	var pen []bool
	if terms.TurnPenalty > 0 {
		pen, _ = t.PenaltyMask(terms.PenaltyCauses)
	}
	for i := 0; i < n; i++ {
		target[i] = int64(full[i+1])
		j := i + 1 - p // response index of the predicted token
		if j < 0 || !t.Policy[j] {
			continue
		}
		a := terms.Sign * t.Advantage
		if t.OPD != nil && !terms.OPDApart {
			a += terms.OPDCoef * t.OPD[j]
		}
		if ref != nil && terms.KLCoef > 0 {
			_, k := KLTerm(t.Logprobs[j], ref[j])
			a += terms.KLCoef * k
		}
		if terms.EntropyCoef > 0 {
			a += terms.EntropyCoef * -t.Logprobs[j]
		}
		if pen != nil && pen[j] {
			a -= terms.TurnPenalty
		}
		lps[i] = float32(t.Logprobs[j])
		adv[i] = float32(a)
		w[i] = 1
	}
	return trainer.Datum{
		ModelInput: trainer.ModelInput{Chunks: []trainer.Chunk{{Type: "encoded_text", Tokens: full[:n]}}},
		LossFnInputs: map[string]trainer.TensorData{
			"target_tokens": trainer.Int64Tensor(target),
			"logprobs":      trainer.Float32Tensor(lps),
			"advantages":    trainer.Float32Tensor(adv),
			"weights":       trainer.Float32Tensor(w),
		},
	}
}

// keyedDatum is a datum with its canonical position in the step.
type keyedDatum struct {
	group, sample int
	datum         trainer.Datum
	// tokens is the datum's number of policy tokens (weight 1).
	tokens int
	// opd is the OPD term at the datum's positions and termTokens the
	// number of its term tokens, for hindsight.term_agg search-mean (nil
	// and 0 otherwise, and for a trajectory that did not fail).
	opd        []float32
	termTokens int
	// opdTokens is the number of its policy tokens with a non-zero OPD
	// term (either route).
	opdTokens int
}

// termPositions lays t's OPD term out at its datum's positions (position
// i predicts response token i+1-len(prompt), as in BuildDatum) and counts
// its term tokens: the policy tokens the term may fall on, the search
// tokens under broadcast search (and earliest, whose term is on one
// turn's: the mean is over the failed trajectories' search tokens all the
// same). A trajectory without a term (no usable
// critique) has zeros there and its tokens still count: the mean is over
// the failed trajectories' term tokens, as the paper's masked mean.
func termPositions(t *rollout.Trajectory, broadcast string) ([]float32, int) {
	p := len(t.PromptIDs)
	n := p + len(t.Tokens) - 1
	opd := make([]float32, max(n, 0))
	count := 0
	for i := 0; i < n; i++ {
		j := i + 1 - p
		if j < 0 || !t.Policy[j] || (broadcast == recipes.BroadcastSearch || broadcast == recipes.BroadcastEarliest) && !t.Search[j] {
			continue
		}
		count++
		if t.OPD != nil {
			opd[i] = float32(t.OPD[j])
		}
	}
	return opd, count
}

// BatchDigest is the sha256 over the JSON of a step's datums in canonical
// order (group, then sample), exactly as they were sent to the trainer.
func batchDigest(ds []keyedDatum) string {
	sorted := append([]keyedDatum(nil), ds...)
	sortKeyed(sorted)
	h := sha256.New()
	for _, d := range sorted {
		b, _ := json.Marshal(d.datum)
		h.Write(b)
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sortKeyed puts datums in canonical order: group, then sample.
func sortKeyed(ds []keyedDatum) {
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].group != ds[j].group {
			return ds[i].group < ds[j].group
		}
		return ds[i].sample < ds[j].sample
	})
}
