package lm

import "math"

// PrefillScore is Score as a server's prefill route reports it, with
// numerical noise of standard deviation noise (nats; 0: none): the logit
// of each token i > 0 is moved by delta ~ N(0, noise^2) against the
// rest of the vocabulary and its log-softmax recomputed, log(p e^delta /
// (1 - p + p e^delta)): never above 0, and to first order lp + (1 - p)
// delta, so zero-mean, a near-certain token barely moving (as a bf16 logit
// error moves it) and an uncertain one by about noise. The noise is
// deterministic in the token id and the exact logprob it perturbs: two
// prefills that compute the same logprob for the same token report the
// same noisy one, as a deterministic kernel does, and every run
// reproduces it.
func (m *Model) PrefillScore(params Params, ids []int, noise float64) []float64 {
	lps := m.Score(params, ids)
	if noise <= 0 {
		return lps
	}
	for i := 1; i < len(lps); i++ {
		lps[i] = shiftLogit(lps[i], noise*prefillGauss(ids[i], lps[i]))
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
