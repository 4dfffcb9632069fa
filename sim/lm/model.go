// Package lm is the simulator's language models: the simulated policy, a
// small stochastic search agent over Qwen2.5's tokenizer whose sampling,
// token logprobs and gradients all come from one definition (Model, with
// its learnable Params), and the simulated judge that critiques its
// trajectories (Judge). Package sim serves them over HTTP.
package lm

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// InvalidActionText is the Search-R1 text appended after a turn with no
// valid action; the policy treats it, like an <information> block, as the end
// of an environment block.
const InvalidActionText = format.InvalidActionText

// CloseInfoText is what the simulated agent writes first when its context
// ends inside an <information> block the environment opened and did not
// close: the block was cut at rollout.max_obs_tokens, Search-R1's cut,
// which drops the closing tag and appends nothing. The agent closes the
// block itself, with the blank line an uncut block ends with, and then
// takes its turn as after any block (docs/simulator.md, "After a cut
// observation"). Its tokens are the policy's, sampled and scored as every
// other token; they depend on no parameter.
const CloseInfoText = "</information>\n\n"

// Model is the simulated policy's sequence model: it samples turns, scores
// token sequences and differentiates their logprobs, all from one
// definition (see agent.go).
type Model struct {
	tk  *Tokenizer
	eps float64
	eos int
	// closeIDs are CloseInfoText's tokens.
	closeIDs []int
	// answers are the gold answers of the questions the agent may be
	// asked, by answerKey (SetAnswers): what its reading skill
	// recognises in passages it has read.
	answers map[string][]string
	// bh is the agent's abnormal behaviours (SetBehaviour).
	bh Behaviour
}

// NewModel returns the model over tokenizer tk with uniform floor eps.
func NewModel(tk *Tokenizer, eps float64) *Model {
	eos, _ := tk.ID(TokIMEnd)
	return &Model{tk: tk, eps: eps, eos: eos, closeIDs: tk.Encode(CloseInfoText)}
}

// SetAnswers gives the model the gold answers of the questions it may be
// asked (question text -> gold answers), for its reading skill: a span of
// a passage the agent has read that exact-matches a gold answer of the
// question gets the learnable feature answer_recognised (agent.go). The
// agent cannot answer from them without reading the passage: nothing else
// reads them. Questions not given have no recognised spans. SetAnswers
// must be called before the model serves; it keeps no reference to qa.
func (m *Model) SetAnswers(qa map[string][]string) {
	m.answers = make(map[string][]string, len(qa))
	for q, golds := range qa {
		m.answers[answerKey(q)] = slices.Clone(golds)
	}
}

// answerKey is the key of a question in Model.answers: its words, lower
// case, without the "?" the prompt adds (format.NormalizeQuestion).
func answerKey(q string) string { return normText(q) }

// state reads the turn state of a context text, with the gold answers of
// its question.
func (m *Model) state(text string) turnState {
	st := parseState(text)
	st.golds = m.answers[answerKey(st.question)]
	return st
}

// Tokenizer returns the model's tokenizer.
func (m *Model) Tokenizer() *Tokenizer { return m.tk }

// Epsilon returns the model's uniform floor (NewModel's eps).
func (m *Model) Epsilon() float64 { return m.eps }

// segment returns the token indices where a policy turn starts (the text
// before them ends with the assistant header or an environment block), with
// the context text before each, and, for each i in 0..len(ids), whether
// ids[:i] ends inside an open <information> block (contextTracker).
func (m *Model) segment(ids []int) (starts []int, prefixes []string, open []bool) {
	var c contextTracker
	open = make([]bool, len(ids)+1)
	for i, id := range ids {
		if c.add(m.tk.Piece(id)) {
			starts = append(starts, i+1)
			prefixes = append(prefixes, c.text())
		}
		open[i+1] = c.open
	}
	return starts, prefixes, open
}

// Tags of an environment block.
const (
	infoOpen  = "<information>"
	infoClose = "</information>"
)

// contextTracker follows a context's text a token at a time: where the
// policy's turns start (after the assistant header, an environment block's
// closing "</information>\n\n", or the invalid-action text), and whether the
// response (the text after the assistant header) is inside an
// <information> block not closed yet (a turn start closes it).
type contextTracker struct {
	b          strings.Builder
	inResponse bool
	open       bool
}

// text returns the text so far.
func (c *contextTracker) text() string { return c.b.String() }

// add appends a token's text and reports whether a policy turn starts
// after it.
func (c *contextTracker) add(piece string) bool {
	before := c.b.Len()
	c.b.WriteString(piece)
	s := c.b.String()
	if strings.HasSuffix(s, assistantHeader) {
		c.inResponse, c.open = true, false
		return true
	}
	if c.inResponse {
		// The last tag that ends within piece decides.
		oi := lastTagEndingAfter(s, infoOpen, before)
		ci := lastTagEndingAfter(s, infoClose, before)
		if oi >= 0 || ci >= 0 {
			c.open = oi > ci
		}
	}
	if strings.HasSuffix(s, "</information>\n\n") || strings.HasSuffix(s, InvalidActionText) {
		// The environment has moved on: a block still open (the agent
		// ended its turn after a cut block without closing it) is over.
		c.open = false
		return true
	}
	return false
}

// lastTagEndingAfter returns the index of the last tag in s that ends
// after byte from (-1 when none does).
func lastTagEndingAfter(s, tag string, from int) int {
	lo := max(from-len(tag)+1, 0)
	i := strings.LastIndex(s[lo:], tag)
	if i < 0 {
		return -1
	}
	return lo + i
}

// closeMatch returns how many of closeIDs' tokens ids already ends with
// (the longest proper prefix of closeIDs that is a suffix of ids): the
// agent, inside an open block, writes closeIDs[k] next.
func (m *Model) closeMatch(ids []int) int {
	for k := len(m.closeIDs) - 1; k > 0; k-- {
		if len(ids) >= k && slices.Equal(ids[len(ids)-k:], m.closeIDs[:k]) {
			return k
		}
	}
	return 0
}

// closeModel is the agent inside an open block: CloseInfoText after
// closeIDs[:closeMatch], and, at Behaviour.CutStopRate, the end of the
// turn before anything.
func (m *Model) closeModel() *turnModel {
	var parts turnParts
	if p := m.bh.CutStopRate; p < 1 {
		parts.answers = append(parts.answers, candidate{ids: m.closeIDs, logp: math.Log1p(-p)})
	}
	if p := m.bh.CutStopRate; p > 0 {
		parts.answers = append(parts.answers, candidate{logp: math.Log(p)})
	}
	return newTurnModel(parts, m.eps, m.tk.VocabSize(), m.eos)
}

// turnAt returns the index into starts of the turn containing position pos
// (-1 when pos precedes every turn).
func turnAt(starts []int, pos int) int {
	k := sort.SearchInts(starts, pos+1) - 1
	return k
}

// sequenceScorer caches one turn model per turn start of a sequence.
type sequenceScorer struct {
	m        *Model
	params   Params
	ids      []int
	starts   []int
	prefixes []string
	open     []bool
	models   map[int]*turnModel
	closer   *turnModel
}

func (m *Model) scorer(params Params, ids []int) *sequenceScorer {
	starts, prefixes, open := m.segment(ids)
	return &sequenceScorer{m: m, params: params, ids: ids, starts: starts, prefixes: prefixes, open: open,
		models: map[int]*turnModel{}, closer: m.closeModel()}
}

func (s *sequenceScorer) turn(k int) *turnModel {
	if tm, ok := s.models[k]; ok {
		return tm
	}
	st := s.m.state(s.prefixes[k])
	var parts turnParts
	if st.hasAssistant {
		parts = buildTurn(st, s.params, s.m.tk, s.m.bh)
	}
	tm := newTurnModel(parts, s.m.eps, s.m.tk.VocabSize(), s.m.eos)
	s.models[k] = tm
	return tm
}

// logProb returns log p(ids[i] | ids[:i]) for i >= 1, adding weight times
// its gradient to grad when grad is non-nil.
func (s *sequenceScorer) logProb(i int, grad []float64, weight float64) float64 {
	if s.open[i] {
		// Inside an open block: the agent closes it (CloseInfoText).
		return s.closer.logProb(s.m.closeIDs[:s.m.closeMatch(s.ids[:i])], s.ids[i], nil, 0)
	}
	k := turnAt(s.starts, i)
	if k < 0 {
		// Before any turn: off-support, the floor (or end of text) only.
		ps := 0.0
		if s.ids[i] == s.m.eos {
			ps = 1
		}
		return math.Log((1-s.m.eps)*ps + s.m.eps/float64(s.m.tk.VocabSize()))
	}
	return s.turn(k).logProb(s.ids[s.starts[k]:i], s.ids[i], grad, weight)
}

// Score returns the logprob of every token of ids given the tokens before
// it under params; entry 0 is 0.
func (m *Model) Score(params Params, ids []int) []float64 {
	out := make([]float64, len(ids))
	s := m.scorer(params, ids)
	for i := 1; i < len(ids); i++ {
		out[i] = s.logProb(i, nil, 0)
	}
	return out
}

// Sampling are the token-level sampling settings, applied as vLLM's sampler
// applies them (see sampling.go); reported logprobs are always the raw
// model's (vLLM's default logprobs mode), whatever the settings.
type Sampling struct {
	// Temperature: below 1e-5 greedy, else clamped to at least 0.01.
	Temperature float64
	// TopP <= 0 or >= 1 is off.
	TopP float64
	// TopK <= 0 is off.
	TopK int
	// MinP <= 0 is off.
	MinP float64
	// RepetitionPenalty <= 0 or 1 is off (so the zero Sampling applies no
	// penalty; a server refuses <= 0 before it gets here).
	RepetitionPenalty float64
	// PresencePenalty and FrequencyPenalty (0: off) apply to the tokens
	// of the output so far.
	PresencePenalty  float64
	FrequencyPenalty float64
	MaxTokens        int
	Stop             []string
	// IncludeStopStr keeps a matched stop string (and a stop token's
	// text) in Text, as vLLM's include_stop_str_in_output; the sampled ids
	// hold the token that completed it either way.
	IncludeStopStr bool
	// KeepSpecialTokens writes special tokens' content into Text (vLLM's
	// skip_special_tokens false; its default skips them).
	KeepSpecialTokens bool
	// IgnoreEOS does not stop at the end-of-turn token by itself: only a
	// stop string or one of StopTokens ends the continuation early (a
	// Tinker server's sampler, SkyRL's JAX one, stops only where the
	// request says; vLLM's ignore_eos).
	IgnoreEOS bool
	// StopTokens end the continuation when sampled (the token kept), as
	// Tinker's stop given as token ids.
	StopTokens []int
}

// Generation is one sampled continuation.
type Generation struct {
	// IDs are the sampled ids, the one that completed a stop string (and
	// may run past it) or the end-of-turn token included.
	IDs      []int
	Logprobs []float64
	// Processed are SGLang's default logprobs of the same draws: each
	// token's log-softmax of the penalised logits divided by the
	// temperature (1 when greedy), before min_p, top_k and top_p (see
	// sampledLogprob). The draws do not depend on them.
	Processed []float64
	// Text is the continuation's text as vLLM's detokenizer makes it (see
	// textStream), cut at a matched stop string.
	Text         string
	FinishReason string
	StopReason   string
}

// Generate samples a continuation of prompt under params with rng. It
// stops as vLLM does: at the end-of-turn token (<|im_end|>), or when the
// text completes one of sp.Stop (the first of the list found in the text
// the last token added), or after sp.MaxTokens tokens.
func (m *Model) Generate(params Params, prompt []int, sp Sampling, rng *rand.Rand) Generation {
	// The sampler follows the context as the scorer segments it: a turn
	// that starts within the continuation (after the agent closed a cut
	// block) gets its own turn model, built from the text before it.
	var c contextTracker
	start, prefix := -1, ""
	for i, id := range prompt {
		if c.add(m.tk.Piece(id)) {
			start, prefix = i+1, c.text()
		}
	}
	turn := func(prefix string) *turnModel {
		return newTurnModel(buildTurn(m.state(prefix), params, m.tk, m.bh), m.eps, m.tk.VocabSize(), m.eos)
	}
	tm := newTurnModel(turnParts{}, m.eps, m.tk.VocabSize(), m.eos)
	var partial []int
	if start >= 0 {
		tm = turn(prefix)
		partial = append(partial, prompt[start:]...)
	}
	closer := m.closeModel()
	// tail is the context's last tokens, enough for closeMatch.
	tail := slices.Clone(prompt[max(len(prompt)-len(m.closeIDs), 0):])
	pen := newPenalties(sp, prompt)
	var g Generation
	var ts textStream
	for len(g.IDs) < sp.MaxTokens {
		cur, part := tm, partial
		if c.open {
			cur, part = closer, m.closeIDs[:m.closeMatch(tail)]
		}
		x, plp := m.sampleNext(cur, part, sp, pen, rng)
		lp := cur.logProb(part, x, nil, 0)
		if pen == nil && sp.Temperature == 1 {
			// Logits divided by 1 with no penalty are the raw logits:
			// SGLang's processed logprob is the raw one, bit for bit.
			plp = lp
		}
		g.IDs = append(g.IDs, x)
		g.Logprobs = append(g.Logprobs, lp)
		g.Processed = append(g.Processed, plp)
		partial = append(partial, x)
		tail = append(tail, x)
		if len(tail) > len(m.closeIDs) {
			tail = tail[1:]
		}
		if c.add(m.tk.Piece(x)) {
			tm, partial = turn(c.text()), nil
		}
		pen.add(x)
		if (x == m.eos && !sp.IgnoreEOS) || slices.Contains(sp.StopTokens, x) {
			// A stop token: vLLM detokenizes it only with
			// include_stop_str_in_output, and checks no stop string.
			if sp.IncludeStopStr {
				ts.add(m.tk, x, sp.KeepSpecialTokens)
			}
			g.FinishReason = "stop"
			break
		}
		n := ts.add(m.tk, x, sp.KeepSpecialTokens)
		if stop, cut := matchStop(ts.text, n, sp.Stop, sp.IncludeStopStr); stop != "" {
			if cut >= 0 {
				ts.text = ts.text[:cut]
			}
			g.FinishReason, g.StopReason = "stop", stop
			break
		}
	}
	if g.FinishReason == "" {
		g.FinishReason = "length"
	}
	g.Text = string(ts.text)
	return g
}

// textStream is vLLM's incremental detokenization of one sequence (Hugging
// Face tokenizers' DecodeStream over a byte-level tokenizer): each token's
// bytes join the ones held back, and they are written out, ill-formed
// sequences replaced by U+FFFD, once their text does not end with U+FFFD (a
// character still incomplete is held back; what is held at the end is never
// written). Special tokens add nothing unless kept.
type textStream struct {
	text []byte
	held []byte
}

// add detokenizes id and returns how many bytes the text grew by.
func (s *textStream) add(tk *Tokenizer, id int, keepSpecial bool) int {
	if tk.IsSpecial(id) && !keepSpecial {
		return 0
	}
	s.held = append(s.held, tk.Piece(id)...)
	if utf8.Valid(s.held) {
		if h := s.held; len(h) >= 3 && string(h[len(h)-3:]) == "\uFFFD" {
			return 0
		}
		s.text = append(s.text, s.held...)
		n := len(s.held)
		s.held = s.held[:0]
		return n
	}
	out := lossyUTF8(s.held)
	if strings.HasSuffix(out, "\uFFFD") {
		return 0
	}
	s.text = append(s.text, out...)
	s.held = s.held[:0]
	return len(out)
}

// StreamText returns the text vLLM's incremental detokenizer writes for
// ids with special tokens skipped (its default; see textStream): the text
// of a completion cut after those tokens, a character still incomplete at
// the end held back.
func StreamText(tk *Tokenizer, ids []int) string {
	var ts textStream
	for _, id := range ids {
		ts.add(tk, id, false)
	}
	return string(ts.text)
}

// matchStop is vLLM's check_stop_strings: the first stop string of the
// list found in text that ends within its last added bytes (added > 0;
// earlier text was checked before). cut is the length the text is cut to:
// the start of the match, or with include its end (-1 when that is the end
// of the text already).
func matchStop(text []byte, added int, stops []string, include bool) (stop string, cut int) {
	if added == 0 {
		return "", -1
	}
	for _, s := range stops {
		if s == "" {
			continue
		}
		from := max(len(text)-added-len(s)+1, 0)
		i := bytes.Index(text[from:], []byte(s))
		if i < 0 {
			continue
		}
		i += from
		if !include {
			return s, i
		}
		if i+len(s) >= len(text) {
			return s, -1
		}
		return s, i + len(s)
	}
	return "", -1
}

// sampleNext draws the next token from the epsilon-mixed distribution with
// vLLM's processing applied at the token level: penalties (pen, nil for
// none), then greedy or temperature, min-p, top-k and top-p (see pick). The
// floor's mass is handled in bulk entries standing for the other vocabulary
// tokens: one for those neither in the prompt nor the output, and, with
// penalties, one per output count for the others.
func (m *Model) sampleNext(tm *turnModel, partial []int, sp Sampling, pen *penalties, rng *rand.Rand) (int, float64) {
	dist := tm.nextDist(partial)
	V := m.tk.VocabSize()
	es := make([]entry, 0, len(dist)+4)
	for _, id := range sortedKeys(dist) {
		p := (1-m.eps)*dist[id] + m.eps/float64(V)
		es = append(es, entry{id: id, n: 1, p: pen.apply(id, p, V)})
	}
	if bulkN := float64(V - len(es)); m.eps > 0 && bulkN > 0 {
		floor := m.eps / float64(V)
		for _, g := range pen.outside(dist) {
			es = append(es, entry{id: bulkSeen, count: g.count, n: float64(g.n), p: pen.applyCount(g.count, floor, V)})
			bulkN -= float64(g.n)
		}
		if bulkN > 0 {
			es = append(es, entry{id: bulkUnseen, n: bulkN, p: floor})
		}
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].p > es[j].p })
	e := es[pick(es, sp, rng)]
	plp := sampledLogprob(es, e, sp)
	switch e.id {
	case bulkUnseen:
		// Uniform over the tokens outside the structured support (and,
		// with penalties, outside the prompt and the output).
		if sp.Temperature < samplingEps {
			for x := 0; x < V; x++ {
				if _, in := dist[x]; !in && !pen.seen(x) {
					return x, plp
				}
			}
		}
		for {
			x := rng.IntN(V)
			if _, in := dist[x]; !in && !pen.seen(x) {
				return x, plp
			}
		}
	case bulkSeen:
		ids := pen.withCount(e.count, dist)
		if sp.Temperature < samplingEps {
			return ids[0], plp
		}
		return ids[rng.IntN(len(ids))], plp
	}
	return e.id, plp
}

// sampledLogprob is SGLang's default reported logprob of a token of entry
// e (sampler.py without SGLANG_RETURN_ORIGINAL_LOGPROB): the log-softmax,
// over the whole vocabulary, of the penalised logits divided by the
// temperature, taken before the min_p, top_k and top_p filters; greedy
// requests (SGLang turns them into top_k 1 at temperature 1) report the
// log-softmax of the penalised logits.
func sampledLogprob(es []entry, e entry, sp Sampling) float64 {
	T := 1.0
	if !sp.Greedy() {
		T = max(sp.Temperature, minTemperature)
	}
	z := 0.0
	for _, x := range es {
		z += x.n * math.Pow(x.p, 1/T)
	}
	return math.Log(e.p)/T - math.Log(z)
}

// LogProbGrad returns log p(ids[i] | ids[:i]) for each i in positions and
// adds sum_i coef[i] * grad log p(ids[i] | ids[:i]) to grad.
func (m *Model) LogProbGrad(params Params, ids []int, positions []int, coef []float64, grad []float64) []float64 {
	s := m.scorer(params, ids)
	out := make([]float64, len(positions))
	for j, i := range positions {
		var g []float64
		if coef != nil && coef[j] != 0 {
			g = grad
		}
		w := 0.0
		if coef != nil {
			w = coef[j]
		}
		out[j] = s.logProb(i, g, w)
	}
	return out
}
