package roles

import (
	"hash/fnv"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/recipes"
)

// Every request that samples or scores sends all of its sampling fields:
// vLLM fills an omitted one from the model's generation_config.json (Qwen2.5
// instruct: temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.05)
// and still reports the raw model's logprobs. Rollouts sample with the
// train.* settings, evaluation greedily with everything else off
// (policy.Greedy), teacher and reference scoring with policy.Greedy (in
// policy.Client.Score), and the judge with judge.temperature and everything
// else off.

// TrainSampling is the sampling of training rollouts: the train.* keys.
func TrainSampling(r *recipes.Recipe) policy.Sampling {
	t := r.Train
	return policy.Sampling{Temperature: t.Temperature, TopP: t.TopP, TopK: t.TopK, MinP: t.MinP,
		RepetitionPenalty: t.RepetitionPenalty, PresencePenalty: t.PresencePenalty, FrequencyPenalty: t.FrequencyPenalty}
}

// JudgeSampling is the judge's sampling: judge.temperature, the other
// settings off.
func JudgeSampling(r *recipes.Recipe) judge.Sampling {
	s := judge.Neutral()
	s.Temperature = r.Judge.Temperature
	return s
}

// JudgeOptions are the judge client's wire options from judge.api and
// judge.max_tokens_field.
func JudgeOptions(r *recipes.Recipe) []judge.Option {
	return []judge.Option{judge.WithAPI(r.Judge.API), judge.WithMaxTokensField(r.Judge.MaxTokensField)}
}

// Seed derives a request's seed from its coordinates (the recipe's seed,
// the step, the group, the sample...): the same coordinates give the same
// seed in every run, a resumed one included, so the same batches are
// sampled; the value is non-negative and below 2^31.
func Seed(parts ...int64) int64 {
	h := fnv.New64a()
	for _, p := range parts {
		var b [8]byte
		for i := range b {
			b[i] = byte(p >> (8 * i))
		}
		h.Write(b[:])
	}
	return int64(h.Sum64() & 0x7fffffff)
}
