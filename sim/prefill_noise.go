package sim

import "github.com/hindsearch/hindsearch/sim/lm"

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

// prefillScore is the model's PrefillScore with the replica's noise.
func (s *PolicyServer) prefillScore(params lm.Params, ids []int) []float64 {
	return s.model.PrefillScore(params, ids, s.prefillNoise)
}
