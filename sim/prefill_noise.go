package sim

import (
	"math"

	"github.com/hindsearch/hindsearch/sim/lm"
)

// SetPrefillNoise sets the standard deviation, in nats, of the numerical
// noise the replica's prefill route adds to the logits of the tokens it
// scores
// (vLLM's prompt_logprobs, SGLang's input_token_logprobs; recipe key
// sim.policy.prefill_noise). Sampled (decode-time) logprobs stay exact. On
// real servers the prefill and decode kernels compute the same logprob
// with different numerics (bf16, other attention kernels, batch shapes),
// so the two routes disagree by a small zero-mean amount; 0 (the default)
// makes them agree exactly. Call it before the server takes requests.
func (s *PolicyServer) SetPrefillNoise(sd float64) { s.prefillNoise = sd }

// prefillScore is lm.Model.Score as the prefill route reports it: the logit
// of each token i > 0 is moved by delta ~ N(0, prefillNoise^2) against the
// rest of the vocabulary and its log-softmax recomputed, log(p e^delta /
// (1 - p + p e^delta)): never above 0, and to first order lp + (1 - p)
// delta, so zero-mean, a near-certain token barely moving (as a bf16 logit
// error moves it) and an uncertain one by about prefillNoise. The noise is
// deterministic in the token id and the exact logprob it perturbs: two
// prefills that compute the same logprob for the same token report the
// same noisy one, as a deterministic kernel does, and every run
// reproduces it.
func (s *PolicyServer) prefillScore(params lm.Params, ids []int) []float64 {
	lps := s.model.Score(params, ids)
	if s.prefillNoise <= 0 {
		return lps
	}
	for i := 1; i < len(lps); i++ {
		lps[i] = shiftLogit(lps[i], s.prefillNoise*prefillGauss(ids[i], lps[i]))
	}
	return lps
}

// shiftLogit is the logprob of a token of logprob lp after its logit moves
// by delta and the distribution is renormalised.
func shiftLogit(lp, delta float64) float64 {
	return math.Min(0, lp+delta-math.Log1p(math.Exp(lp)*math.Expm1(delta)))
}

// prefillGauss is a standard normal draw (Box-Muller) seeded by a token id
// and the bits of its logprob.
func prefillGauss(id int, lp float64) float64 {
	h := splitmix64(uint64(id)*0x9e3779b97f4a7c15 ^ math.Float64bits(lp))
	u1 := (float64(h>>11) + 0.5) / (1 << 53)
	u2 := float64(splitmix64(h)>>11) / (1 << 53)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// splitmix64 is one step of the SplitMix64 generator's output function.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
