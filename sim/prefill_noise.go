package sim

import "math"

// SetPrefillNoise sets the standard deviation, in nats, of the numerical
// noise the replica's prefill route adds to the logprobs it scores
// (vLLM's prompt_logprobs, SGLang's input_token_logprobs; recipe key
// sim.policy.prefill_noise). Sampled (decode-time) logprobs stay exact. On
// real servers the prefill and decode kernels compute the same logprob
// with different numerics (bf16, other attention kernels, batch shapes),
// so the two routes disagree by a small zero-mean amount; 0 (the default)
// makes them agree exactly. Call it before the server takes requests.
func (s *PolicyServer) SetPrefillNoise(sd float64) { s.prefillNoise = sd }

// prefillScore is Model.Score as the prefill route reports it: entry i > 0
// gets Gaussian noise of sd prefillNoise, capped at 0 (a log-softmax is
// never positive). The noise is deterministic in the token id and the
// exact logprob it perturbs: two prefills that compute the same logprob
// for the same token report the same noisy one, as a deterministic kernel
// does, and every run reproduces it.
func (s *PolicyServer) prefillScore(params Params, ids []int) []float64 {
	lps := s.model.Score(params, ids)
	if s.prefillNoise <= 0 {
		return lps
	}
	for i := 1; i < len(lps); i++ {
		lps[i] = math.Min(0, lps[i]+s.prefillNoise*prefillGauss(ids[i], lps[i]))
	}
	return lps
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
