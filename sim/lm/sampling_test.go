package lm

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// The repetition penalty divides a positive logit and multiplies a
// negative one; then the frequency penalty comes off once per output
// occurrence and the presence penalty once (vLLM's apply_penalties). The
// simulated logit of a probability p over V tokens is log(p V).
func TestSimRepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits(t *testing.T) {
	const V = 100
	pen := &penalties{rep: 1.25, pres: 0.5, freq: 0.25}
	logit := func(p float64) float64 { return math.Log(p * V) }
	for _, tc := range []struct {
		p     float64
		count int
		want  float64 // the penalised logit
	}{
		{0.5, 0, logit(0.5) / 1.25},                  // likely, prompt only
		{0.001, 0, logit(0.001) * 1.25},              // unlikely, prompt only
		{0.5, 2, logit(0.5)/1.25 - 2*0.25 - 0.5},     // twice in the output
		{0.001, 1, logit(0.001)*1.25 - 1*0.25 - 0.5}, // once in the output
	} {
		got := logit(pen.applyCount(tc.count, tc.p, V))
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("p %v count %d: logit %v, want %v", tc.p, tc.count, got, tc.want)
		}
	}
	// A token neither in the prompt nor the output keeps its probability.
	pen.count, pen.hist = map[int]int{7: 0}, map[int]int{0: 1}
	if got := pen.apply(8, 0.5, V); got != 0.5 {
		t.Errorf("unseen token: %v, want 0.5", got)
	}
	if got := pen.apply(7, 0.5, V); got == 0.5 {
		t.Error("a prompt token was not penalised")
	}
	if newPenalties(Sampling{RepetitionPenalty: 1}, []int{1, 2}) != nil || newPenalties(Sampling{}, []int{1}) != nil {
		t.Error("penalties that are all off are not nil")
	}
}

// vllmReference is vLLM's sampler written out over explicit logits, one a
// token (sampler.py and topk_topp_sampler.py, after the penalties): divide
// by the temperature, mask min_p, mask below the k-th largest, then sort
// ascending and mask while the cumulative probability stays within 1 -
// top_p, the largest always kept. It returns each token's probability.
func vllmReference(logits []float64, temp float64, topK int, topP, minP float64) []float64 {
	n := len(logits)
	l := make([]float64, n)
	for i, x := range logits {
		l[i] = x / temp
	}
	softmax := func(xs []float64) []float64 {
		m := math.Inf(-1)
		for _, x := range xs {
			m = math.Max(m, x)
		}
		out := make([]float64, len(xs))
		z := 0.0
		for i, x := range xs {
			out[i] = math.Exp(x - m)
			z += out[i]
		}
		for i := range out {
			out[i] /= z
		}
		return out
	}
	if minP > 0 {
		p := softmax(l)
		top := slices.Max(p)
		for i := range l {
			if p[i] < minP*top {
				l[i] = math.Inf(-1)
			}
		}
	}
	order := make([]int, n) // ascending
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return l[order[a]] < l[order[b]] })
	if topK > 0 && topK < n {
		kth := l[order[n-topK]]
		for i := range l {
			if l[i] < kth {
				l[i] = math.Inf(-1)
			}
		}
	}
	if topP > 0 && topP < 1 {
		p := softmax(l)
		cum := 0.0
		for j, i := range order {
			cum += p[i]
			if cum <= 1-topP && j < n-1 {
				l[i] = math.Inf(-1)
			}
		}
	}
	return softmax(l)
}

// The sampler keeps and draws tokens as vLLM's does, for each processing
// step alone and together: ties at the k-th are kept, top_p cuts through a
// set of equally likely tokens token by token and always keeps the most
// likely one. Checked statistically against vllmReference over the tokens
// spelled out one by one.
func TestSimSamplerFollowsVLLMsPipeline(t *testing.T) {
	// Five tokens, two of them tied, and 100 equally likely others.
	structured := []float64{0.3, 0.2, 0.2, 0.1, 0.05}
	const bulk, bulkP = 100, 0.0015
	es := make([]entry, 0, len(structured)+1)
	var logits []float64
	for i, p := range structured {
		es = append(es, entry{id: i, n: 1, p: p})
		logits = append(logits, math.Log(p))
	}
	es = append(es, entry{id: bulkUnseen, n: bulk, p: bulkP})
	for range bulk {
		logits = append(logits, math.Log(bulkP))
	}
	n := draws()
	for _, sp := range []Sampling{
		{Temperature: 1},
		{Temperature: 0.7, TopP: 0.8},
		{Temperature: 1, TopP: 0.9},  // cuts through the 100
		{Temperature: 1, TopP: 1e-6}, // the most likely only
		{Temperature: 1.3, TopK: 2},  // keeps both ties at the 2nd
		{Temperature: 1, TopK: 7},    // a k-th inside the 100: all of them kept
		{Temperature: 1, MinP: 0.3},
		{Temperature: 0.5, TopK: 4, TopP: 0.9, MinP: 0.05},
		{Temperature: 0.005, TopP: 0.95}, // raised to 0.01
	} {
		ref := vllmReference(logits, max(sp.Temperature, minTemperature), sp.TopK, sp.TopP, sp.MinP)
		want := append([]float64(nil), ref[:len(structured)]...)
		rest := 0.0
		for _, p := range ref[len(structured):] {
			rest += p
		}
		want = append(want, rest)
		counts := make([]int, len(es))
		for i := 0; i < n; i++ {
			counts[pick(es, sp, rand.New(rand.NewPCG(uint64(i), 99)))]++
		}
		for b, p := range want {
			e := float64(n) * p
			sd := math.Sqrt(float64(n) * p * (1 - p))
			if math.Abs(float64(counts[b])-e) > 5*sd+1 {
				t.Errorf("%+v: bin %d drawn %d of %d times, vLLM's probability %.4g (expected %.1f)", sp, b, counts[b], n, p, e)
			}
		}
	}
	// Greedy takes the first entry and draws nothing.
	rng := rand.New(rand.NewPCG(1, 2))
	before := *rng
	if i := pick(es, Sampling{Temperature: 0, TopK: 3}, rng); i != 0 || *rng != before {
		t.Errorf("greedy picked %d or used the rng", i)
	}
}
