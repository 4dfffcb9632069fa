package lm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/hindsearch/hindsearch/recipes"
)

// The simulated servers take their sampling settings as vLLM does (read in
// vllm-project/vllm: entrypoints/openai/completion/protocol.py and
// chat_completion/protocol.py for the defaults, config/model.py
// get_diff_sampling_param for the generation config, sampling_params.py
// for the checks, v1/sample/sampler.py and ops/topk_topp_sampler.py for the
// order they are applied in; the commits are in
// docs/conformance.md):
//
//   - a field the request omits (or sends as null) takes the model's
//     generation config value, and without one vLLM's built-in default
//     (temperature 1, top_p 1, top_k off, min_p 0, repetition_penalty 1,
//     presence and frequency penalties 0); a completions request without
//     max_tokens gets 16, a chat request max_completion_tokens, else
//     max_tokens, else the generation config's max_new_tokens, else the
//     room left in the context;
//   - the resolved values are checked (400 when out of range);
//   - logprobs are computed from the raw logits, before anything below;
//   - the repetition penalty divides the positive logits and multiplies
//     the others of every token in the prompt or the output so far, then
//     the frequency penalty is subtracted once per output occurrence and
//     the presence penalty once per output token;
//   - below temperature 1e-5 the token is the argmax of those logits;
//     otherwise the logits are divided by the temperature (at least 0.01),
//     tokens less likely than min_p times the most likely one are dropped,
//     then all but the top_k most likely (ties at the k-th kept), then,
//     from the least likely up, the tokens whose cumulative probability
//     stays within 1 - top_p (the most likely one always kept), and the
//     token is drawn from what is left.
//
// The simulated policy's logit of a token is log(p * V), p its probability
// (floor included) and V the vocabulary size: a token likelier than uniform
// has a positive logit, as a language model's likely tokens do, so the
// repetition penalty pulls likely tokens down and pushes unlikely ones
// further down, as it does on a real model.

const (
	// samplingEps is vLLM's greedy threshold on the temperature.
	samplingEps = 1e-5
	// minTemperature is the least temperature vLLM samples with (it
	// raises lower positive ones to it).
	minTemperature = 0.01
)

// CompletionsMaxTokens is the max_tokens of a completions request that
// sends none (CompletionRequest's default in vLLM, whatever the generation
// config says).
const CompletionsMaxTokens = 16

// GenerationConfig is the sampling part of a model's generation_config.json
// as vLLM reads it with --generation-config auto (its default): each nil
// field is one the file does not set. The zero value is a file with no
// sampling defaults (as vLLM's --generation-config vllm).
type GenerationConfig struct {
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
	// MaxNewTokens is vLLM's default max_tokens of a chat request (a
	// completions request defaults to 16 regardless).
	MaxNewTokens *int
}

// QwenInstructGenerationConfig returns the generation config Qwen2.5
// instruct models ship: temperature 0.7, top_p 0.8, top_k 20,
// repetition_penalty 1.05, nothing else.
func QwenInstructGenerationConfig() GenerationConfig {
	t, p, k, r := 0.7, 0.8, 20, 1.05
	return GenerationConfig{Temperature: &t, TopP: &p, TopK: &k, RepetitionPenalty: &r}
}

// GenerationConfigFromRecipe converts sim.generation_config. Every field
// is set, a value equal to vLLM's own default acting as an unset one;
// max_new_tokens 0 is unset.
func GenerationConfigFromRecipe(g recipes.SimGenerationConfig) GenerationConfig {
	t, p, k, m, r := g.Temperature, g.TopP, g.TopK, g.MinP, g.RepetitionPenalty
	gc := GenerationConfig{Temperature: &t, TopP: &p, TopK: &k, MinP: &m, RepetitionPenalty: &r}
	if n := g.MaxNewTokens; n > 0 {
		gc.MaxNewTokens = &n
	}
	return gc
}

// SamplingFields are the sampling fields of a vLLM completions or chat
// request as its JSON carries them, each nil when omitted or null. The
// servers embed it in their request types and call Resolve.
type SamplingFields struct {
	Temperature       *float64 `json:"temperature"`
	TopP              *float64 `json:"top_p"`
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	PresencePenalty   *float64 `json:"presence_penalty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty"`
}

// Resolve fills the omitted fields from gc, then from vLLM's built-in
// defaults, and checks the result as vLLM's SamplingParams does: an error
// names the field out of range and its range (a server answers 400). The
// returned Sampling has vLLM's greedy normalisation applied (below
// temperature 1e-5, top_p, top_k and min_p are off) and the temperature
// floor; its MaxTokens, Stop and the other request-level settings are left
// for the caller.
func (f SamplingFields) Resolve(gc GenerationConfig) (Sampling, error) {
	num := func(req, gen *float64, def float64) float64 {
		switch {
		case req != nil:
			return *req
		case gen != nil:
			return *gen
		}
		return def
	}
	sp := Sampling{
		Temperature:       num(f.Temperature, gc.Temperature, 1),
		TopP:              num(f.TopP, gc.TopP, 1),
		MinP:              num(f.MinP, gc.MinP, 0),
		RepetitionPenalty: num(f.RepetitionPenalty, gc.RepetitionPenalty, 1),
		PresencePenalty:   num(f.PresencePenalty, nil, 0),
		FrequencyPenalty:  num(f.FrequencyPenalty, nil, 0),
	}
	switch {
	case f.TopK != nil:
		sp.TopK = *f.TopK
	case gc.TopK != nil:
		sp.TopK = *gc.TopK
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(sp.PresencePenalty >= -2 && sp.PresencePenalty <= 2):
		return sp, fmt.Errorf("presence_penalty must be in [-2, 2], got %v", sp.PresencePenalty)
	case !(sp.FrequencyPenalty >= -2 && sp.FrequencyPenalty <= 2):
		return sp, fmt.Errorf("frequency_penalty must be in [-2, 2], got %v", sp.FrequencyPenalty)
	case !finite(sp.RepetitionPenalty) || sp.RepetitionPenalty <= 0:
		return sp, fmt.Errorf("repetition_penalty must be a finite number above 0, got %v", sp.RepetitionPenalty)
	case !finite(sp.Temperature) || sp.Temperature < 0 || sp.Temperature > 2:
		return sp, fmt.Errorf("temperature must be in [0, 2], got %v", sp.Temperature)
	case !(sp.TopP > 0 && sp.TopP <= 1):
		return sp, fmt.Errorf("top_p must be in (0, 1], got %v", sp.TopP)
	case sp.TopK < -1:
		return sp, fmt.Errorf("top_k must be -1 or 0 (off) or at least 1, got %d", sp.TopK)
	case !(sp.MinP >= 0 && sp.MinP <= 1):
		return sp, fmt.Errorf("min_p must be in [0, 1], got %v", sp.MinP)
	}
	if sp.Temperature > 0 && sp.Temperature < minTemperature {
		sp.Temperature = minTemperature
	}
	if sp.TopK < 0 {
		sp.TopK = 0
	}
	if sp.Temperature < samplingEps {
		sp.TopP, sp.TopK, sp.MinP = 1, 0, 0
	}
	return sp, nil
}

// Greedy reports whether sp samples greedily: its temperature is below
// vLLM's threshold 1e-5, so the most likely token is taken and nothing is
// drawn from the rng.
func (sp Sampling) Greedy() bool { return sp.Temperature < samplingEps }

// entry is one token, or a set of tokens sharing one probability, of a
// next-token distribution being sampled from.
type entry struct {
	id    int     // the token, or bulkUnseen / bulkSeen
	count int     // bulkSeen: the output count its tokens share
	n     float64 // tokens in the entry
	p     float64 // each one's probability after penalties (unnormalised)
}

// The ids of bulk entries.
const (
	bulkUnseen = -1 // off-support tokens neither in the prompt nor the output
	bulkSeen   = -2 // off-support tokens in the prompt or the output
)

// pick applies vLLM's sampling to es (penalties already in each p, sorted
// most likely first) and returns the index of the entry drawn; a partly
// kept entry is drawn in proportion to the tokens of it kept, and the
// caller draws one of its tokens uniformly. It draws nothing from rng when
// sp is greedy.
func pick(es []entry, sp Sampling, rng *rand.Rand) int {
	if sp.Greedy() {
		return 0
	}
	T := max(sp.Temperature, minTemperature)
	w := make([]float64, len(es))    // each token's weight
	kept := make([]float64, len(es)) // tokens of each entry still in
	for i, e := range es {
		w[i], kept[i] = math.Pow(e.p, 1/T), e.n
	}
	if sp.MinP > 0 {
		floor := sp.MinP * w[0]
		for i := range es {
			if w[i] < floor {
				kept[i] = 0
			}
		}
	}
	if k := sp.TopK; k > 0 {
		// The k-th most likely token's weight; every token as likely is
		// kept too. Fewer than k tokens left: nothing more goes.
		cum := 0.0
		for i := range es {
			if kept[i] == 0 {
				continue
			}
			if cum += kept[i]; cum >= float64(k) {
				for j := i + 1; j < len(es); j++ {
					if w[j] < w[i] {
						kept[j] = 0
					}
				}
				break
			}
		}
	}
	if p := sp.TopP; p > 0 && p < 1 {
		z := 0.0
		top := -1
		for i := range es {
			if kept[i] > 0 {
				z += kept[i] * w[i]
				if top < 0 {
					top = i
				}
			}
		}
		limit, cum := 1-p, 0.0
		for i := len(es) - 1; i >= 0 && z > 0; i-- {
			if kept[i] == 0 {
				continue
			}
			q, n := w[i]/z, kept[i]
			most := n
			if i == top {
				most = n - 1 // the most likely token always stays
			}
			var drop float64
			if n == 1 {
				if most >= 1 && cum+q <= limit {
					drop = 1
				}
			} else if limit > cum {
				drop = math.Min(math.Floor((limit-cum)/q), most)
			}
			kept[i] -= drop
			if drop < n {
				break // everything likelier stays
			}
			cum += n * q
		}
	}
	total := 0.0
	last := -1
	for i := range es {
		if kept[i] > 0 {
			total += kept[i] * w[i]
			last = i
		}
	}
	if last < 0 || !(total > 0) {
		return 0
	}
	u := rng.Float64() * total
	for i := range es {
		if kept[i] == 0 {
			continue
		}
		u -= kept[i] * w[i]
		if u < 0 || i == last {
			return i
		}
	}
	return last
}

// penalties are a request's repetition, presence and frequency penalties
// with the tokens they apply to; nil when all are off.
type penalties struct {
	rep, pres, freq float64
	// count maps each token of the prompt or the output to its
	// occurrences in the output (0: in the prompt only).
	count map[int]int
	// hist maps an output count to the number of tokens with it.
	hist map[int]int
}

// newPenalties returns the penalties of sp over prompt, or nil when sp
// has none.
func newPenalties(sp Sampling, prompt []int) *penalties {
	rep := sp.RepetitionPenalty
	if rep <= 0 {
		rep = 1
	}
	if rep == 1 && sp.PresencePenalty == 0 && sp.FrequencyPenalty == 0 {
		return nil
	}
	p := &penalties{rep: rep, pres: sp.PresencePenalty, freq: sp.FrequencyPenalty, count: map[int]int{}, hist: map[int]int{}}
	for _, id := range prompt {
		if _, ok := p.count[id]; !ok {
			p.count[id] = 0
			p.hist[0]++
		}
	}
	return p
}

// add records that x was sampled.
func (p *penalties) add(x int) {
	if p == nil {
		return
	}
	c, ok := p.count[x]
	if ok {
		if p.hist[c]--; p.hist[c] == 0 {
			delete(p.hist, c)
		}
	}
	p.count[x] = c + 1
	p.hist[c+1]++
}

// seen reports whether x is in the prompt or the output.
func (p *penalties) seen(x int) bool {
	if p == nil {
		return false
	}
	_, ok := p.count[x]
	return ok
}

// apply returns probability prob of token id after the penalties, over a
// vocabulary of vocab tokens.
func (p *penalties) apply(id int, prob float64, vocab int) float64 {
	if p == nil {
		return prob
	}
	c, ok := p.count[id]
	if !ok {
		return prob
	}
	return p.applyCount(c, prob, vocab)
}

// applyCount penalises prob for a token in the prompt or the output, c
// times in the output: on the logit log(prob * vocab), as vLLM does on a
// model's logits.
func (p *penalties) applyCount(c int, prob float64, vocab int) float64 {
	off := math.Log(float64(vocab))
	l := math.Log(prob) + off
	if l > 0 {
		l /= p.rep
	} else {
		l *= p.rep
	}
	l -= p.freq * float64(c)
	if c > 0 {
		l -= p.pres
	}
	return math.Exp(l - off)
}

// countGroup is n seen tokens outside a distribution's support sharing
// output count count.
type countGroup struct{ count, n int }

// outside returns the seen tokens outside dist grouped by output count,
// fewest occurrences first (nil without penalties).
func (p *penalties) outside(dist map[int]float64) []countGroup {
	if p == nil {
		return nil
	}
	in := map[int]int{}
	for id := range dist {
		if c, ok := p.count[id]; ok {
			in[c]++
		}
	}
	var out []countGroup
	for c, n := range p.hist {
		if n -= in[c]; n > 0 {
			out = append(out, countGroup{c, n})
		}
	}
	slices.SortFunc(out, func(a, b countGroup) int { return a.count - b.count })
	return out
}

// withCount lists, in increasing order, the seen tokens outside dist with
// output count c.
func (p *penalties) withCount(c int, dist map[int]float64) []int {
	var ids []int
	for id, n := range p.count {
		if _, in := dist[id]; n == c && !in {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
