package orchestrator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"sort"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
)

// advantageEps is the epsilon of the GRPO normalisation.
const advantageEps = 1e-6

// GroupAdvantages returns the GRPO advantages (r - mean) / (std + eps) of a
// group's rewards (population standard deviation).
func GroupAdvantages(rewards []float64) []float64 {
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
	std := math.Sqrt(v / float64(len(rewards)))
	for i, r := range rewards {
		out[i] = (r - mean) / (std + advantageEps)
	}
	return out
}

// BuildDatum turns a trajectory into a Tinker datum: the model input is the
// prompt and response tokens but the last, position i predicting token i+1.
// Policy positions carry the sampling logprob, the advantage (the group
// advantage times sign, plus coef times the OPD term) and weight 1; prompt
// and environment positions carry zeros.
func BuildDatum(t *rollout.Trajectory, sign, coef float64) trainer.Datum {
	full := append(append([]int(nil), t.PromptIDs...), t.Tokens...)
	n := len(full) - 1
	target := make([]int64, n)
	lps := make([]float32, n)
	adv := make([]float32, n)
	w := make([]float32, n)
	p := len(t.PromptIDs)
	for i := 0; i < n; i++ {
		target[i] = int64(full[i+1])
		j := i + 1 - p // response index of the predicted token
		if j < 0 || !t.Policy[j] {
			continue
		}
		a := sign * t.Advantage
		if t.OPD != nil {
			a += coef * t.OPD[j]
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
