package lm

import (
	"math"
	"strings"
)

// Behaviour is the simulated agent's abnormal behaviours (sim.agent), the
// failures a search agent's health metrics watch for, each off at 0. The
// rates are fixed turn probabilities, not learnable parameters: the
// agent's other turns share the rest of each turn's probability, and a
// behaviour's turns get no gradient, so training neither learns nor
// unlearns them (the filter and the turn penalty change what is trained,
// not these rates). ThinkCollapse is the one that moves with training.
type Behaviour struct {
	// InvalidRate is the probability of a turn with no action: a thought,
	// then a sentence with neither <search> nor <answer>.
	InvalidRate float64
	// RepeatRate is the probability, once the trajectory has searched, of
	// a turn that searches its latest query again, word for word.
	RepeatRate float64
	// RambleRate is the probability of a turn whose thought never closes:
	// the agent reasons on past rollout.max_turn_tokens, and the turn is
	// cut there.
	RambleRate float64
	// ThinkCollapse is the distance (Euclidean, in parameter space) of the
	// policy's parameters from the base model's at which its thoughts are
	// empty ("<think> </think>"); nearer, they lose words in proportion.
	// 0: the thoughts never change. As training moves the weights away
	// from the base model's, the reasoning channel shrinks: a collapse the
	// health alarm (health.drop) is there to see.
	ThinkCollapse float64
	// CutStopRate is the probability that, in a context ending inside an
	// <information> block cut at rollout.max_obs_tokens, the agent ends
	// its turn at once (an empty turn, no action) instead of closing the
	// block itself (CloseInfoText). 1 is the agent before issue 36; what
	// a real model does there has not been observed (docs/simulator.md,
	// "After a cut observation").
	CutStopRate float64
	// SearchBias is added to the logit of searching at every turn: above 0
	// the agent searches more often and longer, as a trained Search-R1
	// agent does (two or three searches a trajectory against the base
	// model's fewer than one); 0 is the base model. The sampling, scoring
	// and training routes share it, so logprobs agree everywhere.
	SearchBias float64
}

// active reports whether any behaviour is on.
func (b Behaviour) active() bool {
	return b.InvalidRate > 0 || b.RepeatRate > 0 || b.RambleRate > 0 || b.ThinkCollapse > 0 || b.CutStopRate > 0
}

// SetBehaviour sets the agent's abnormal behaviours; like SetAnswers, it
// must be called before the model serves.
func (m *Model) SetBehaviour(b Behaviour) { m.bh = b }

// Texts of the abnormal turns.
const (
	// invalidTurn follows the search thought: no tag, so no action.
	invalidTurn = "Let me look this up in the passages first."
	// rambleWords repeat, inside a thought that never closes, until the
	// turn's token cap cuts them.
	rambleWords = " Let me think about this once more, step by step."
	// rambleRepeats makes the ramble about 1,400 tokens, past any usual
	// rollout.max_turn_tokens.
	rambleRepeats = 120
)

// thoughtWords are the search thought's words; the answer thought shares
// the first two ("I" "need"/"have").
var (
	searchThoughtWords = []string{"I", "need", "more", "information."}
	answerThoughtWords = []string{"I", "have", "enough", "information."}
	initialParams      = InitialParams()
)

// thoughts returns the search and answer thoughts under params: the
// fixed thoughtSearch and thoughtAnswer, or, with ThinkCollapse, ones
// that keep a share of their words shrinking with params' distance from
// the base model's, down to "<think> </think>\n".
func (b Behaviour) thoughts(params Params) (search, answer string) {
	if b.ThinkCollapse <= 0 {
		return thoughtSearch, thoughtAnswer
	}
	d := 0.0
	for i, v := range params {
		if i < len(initialParams) {
			d += (v - initialParams[i]) * (v - initialParams[i])
		}
	}
	keep := 1 - math.Sqrt(d)/b.ThinkCollapse
	k := int(math.Ceil(float64(len(searchThoughtWords)) * keep))
	k = min(max(k, 0), len(searchThoughtWords))
	if k == 0 {
		return "<think> </think>\n", "<think> </think>\n"
	}
	return "<think> " + strings.Join(searchThoughtWords[:k], " ") + " </think>\n",
		"<think> " + strings.Join(answerThoughtWords[:k], " ") + " </think>\n"
}

// abnormal returns the behaviours' whole-turn candidates for a turn in
// state st (each with its fixed probability as logp and no gradient) and
// the log of the probability left to the agent's normal turns.
func (b Behaviour) abnormal(st turnState, thS string, tk *Tokenizer) (cands []candidate, logRest float64) {
	if !b.active() {
		return nil, 0
	}
	zero := make([]float64, NumParams)
	add := func(rate float64, text string, shared bool) {
		if rate <= 0 {
			return
		}
		ids := tk.encodeShared(text)
		if !shared {
			ids = tk.Encode(text)
		}
		cands = append(cands, candidate{text: text, ids: ids, logp: math.Log(rate), grad: zero})
	}
	rest := 1.0
	add(b.InvalidRate, thS+invalidTurn, true)
	rest -= b.InvalidRate
	if st.canSearch && len(st.rawSearches) > 0 {
		add(b.RepeatRate, thS+"<search> "+st.rawSearches[len(st.rawSearches)-1]+" </search>"+searchTurnEnd, false)
		rest -= b.RepeatRate
	}
	add(b.RambleRate, "<think>"+strings.Repeat(rambleWords, rambleRepeats), true)
	rest -= b.RambleRate
	if rest <= 0 {
		return cands, math.Inf(-1)
	}
	return cands, math.Log(rest)
}
