package doctor

import (
	"context"
	"fmt"
	"math"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/recipes"
)

// prefillRow is the name of the doctor row that compares sampled and
// prefill-scored logprobs.
const prefillRow = "sampled vs prefill"

// prefillBiasWarn is the clamp bias, in nats per search token, above which
// the sampled vs prefill row warns: a quarter of the mean OPD term on
// search tokens the embedded demo measures (about 0.02).
const prefillBiasWarn = 0.005

// prefillProbeSeeds is how many first turns of the agent prompt the
// sampled vs prefill row samples and scores again.
const prefillProbeSeeds = 4

// prefillProbeQuestion is the question of the sampled vs prefill probe's
// agent prompt: its first turn is mostly a search, whose tokens are the
// ones the OPD term lands on.
const prefillProbeQuestion = "In which city was the composer of the opera Carmen born?"

// prefillCheck samples a few first turns of the agent prompt of
// prefillProbeQuestion at temperature 1 and scores the same tokens through the prefill route
// (Score, as the teacher is scored), on replica p. It reports the mean
// difference prefill - sampled over the sampled tokens and the bias it
// implies for the clamped OPD term with a teacher equal to the student,
// E[clamp(prefill - sampled, 0, hindsight.clamp)] per token: numerical
// noise between the two routes that the clamp turns into a positive term
// on every search token. It warns above prefillBiasWarn unless
// hindsight.student_logprobs is rescored (both sides then come from the
// prefill route).
func (c *checker) prefillCheck(ctx context.Context, p policy.Policy) Check {
	ch := Check{Role: "policy", Server: p.URL(), Name: prefillRow}
	msgs := []policy.Message{{Role: "user", Content: format.UserPrompt(prefillProbeQuestion, "")}}
	var prompt []int
	if c.sglang() {
		// The prompt is built locally (policy.tokenize local), as runs do.
		tok, err := c.deps.LocalTokenizer()
		if err != nil {
			ch.Status, ch.Detail = CheckSkip, "no local tokenizer to build the probe prompt"
			return ch
		}
		prompt = tok.Vocab.AppendEncode(nil, tok.Chat(msgs, true))
	} else {
		cctx, cancel := c.bounded(ctx)
		ids, err := p.TokenizeChat(cctx, c.r.Policy.Model, msgs, true)
		cancel()
		if err != nil {
			ch.Status, ch.Detail = CheckSkip, "POST /tokenize of the probe prompt: "+reason(err)
			return ch
		}
		prompt = ids
	}
	var diffs []float64
	for s := int64(1); s <= prefillProbeSeeds; s++ {
		seed := s
		comp, lps, scoreErr, err := c.sampleThenScore(ctx, p, policy.CompletionRequest{Model: c.r.Policy.Model, Prompt: prompt, MaxTokens: 64,
			Sampling: policy.Neutral(), Seed: &seed, Stop: []string{"</search>", "</answer>"}})
		switch {
		case err != nil:
			ch.Status, ch.Detail = CheckSkip, "sampling the probe: "+reason(err)
			return ch
		case len(comp.TokenIDs) == 0 || len(comp.Logprobs) != len(comp.TokenIDs):
			continue
		case scoreErr != nil:
			ch.Status, ch.Detail = CheckSkip, "scoring the probe: "+reason(scoreErr)
			return ch
		}
		for j, lp := range comp.Logprobs {
			diffs = append(diffs, lps[len(prompt)+j]-lp)
		}
	}
	if len(diffs) == 0 {
		ch.Status, ch.Detail = CheckSkip, "the probes sampled no tokens"
		return ch
	}
	mean, abs, bias := prefillStats(diffs, c.r.Hindsight.Clamp)
	ch.Detail = fmt.Sprintf("over %d sampled tokens: prefill - sampled logprob mean %+.4f, mean |difference| %.4f; clamp bias %.4f nats per token",
		len(diffs), mean, abs, bias)
	switch {
	case bias <= prefillBiasWarn:
		ch.Status = CheckOK
	case c.r.Hindsight.StudentLogprobs == recipes.StudentLogprobsRescored:
		ch.Status, ch.Detail = CheckOK, ch.Detail+"; hindsight.student_logprobs is rescored: the term compares prefill with prefill"
	case !c.r.Hindsight.Enabled || c.r.Hindsight.Loss == recipes.HindsightLossNone:
		ch.Status, ch.Detail = CheckOK, ch.Detail+"; no OPD term in this recipe"
	default:
		ch.Status = CheckWarn
		ch.Fix = fmt.Sprintf("the clamped OPD term adds about %.4f on every search token from numerical noise alone (over %g nats is significant): set hindsight.student_logprobs: rescored (one extra prefill per failed trajectory)", bias, prefillBiasWarn)
	}
	return ch
}

// prefillStats returns the mean of diffs, their mean absolute value, and
// the mean of clamp(d, 0, c), the bias a clamped term takes from them.
func prefillStats(diffs []float64, c float64) (mean, abs, bias float64) {
	for _, d := range diffs {
		mean += d
		abs += math.Abs(d)
		bias += math.Max(0, math.Min(c, d))
	}
	n := float64(len(diffs))
	return mean / n, abs / n, bias / n
}
