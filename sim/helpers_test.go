package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// trainSampling, trajectory, rollout and bm25Docs are a copy of lm's
// (lm/helpers_test.go), over lm's exported API: lm's own tests cannot
// import a package that imports lm. sim/trainer's tests hold a third copy
// (trainer/helpers_test.go). Keep the three alike.

// trainSampling is Search-R1's training sampling: temperature 1, no top-p
// or top-k, a turn ending at </search> or </answer>.
func trainSampling() lm.Sampling {
	return lm.Sampling{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 500, Stop: format.StopStrings, IncludeStopStr: true}
}

// trajectory is one multi-turn rollout of the policy against a retriever.
type trajectory struct {
	ids       []int
	policy    []bool    // ids[i] was sampled by the policy
	lps       []float64 // the sampling logprob of ids[i] (policy tokens only)
	promptLen int
	response  string // the text after the prompt
	queries   []string
	answer    string
	answered  bool
}

// policyPositions returns the indices of the policy's tokens.
func (tr trajectory) policyPositions() []int {
	var out []int
	for i, p := range tr.policy {
		if p {
			out = append(out, i)
		}
	}
	return out
}

// rollout runs the agent loop of Search-R1 with m under params: sample a
// turn, append the information block for a search (docs of the query) or
// the invalid-action text, until an answer or maxTurns turns.
func rollout(m *lm.Model, params lm.Params, question, hint string, sp lm.Sampling, rng *rand.Rand, maxTurns int, docs func(string) []string) trajectory {
	tk := m.Tokenizer()
	var tr trajectory
	tr.ids = tk.Encode(promptText(question, hint))
	tr.promptLen = len(tr.ids)
	tr.policy = make([]bool, len(tr.ids))
	tr.lps = make([]float64, len(tr.ids))
	env := func(text string) {
		ids := tk.Encode(text)
		tr.ids = append(tr.ids, ids...)
		tr.policy = append(tr.policy, make([]bool, len(ids))...)
		tr.lps = append(tr.lps, make([]float64, len(ids))...)
		tr.response += text
	}
	for turn := 0; turn < maxTurns; turn++ {
		g := m.Generate(params, tr.ids, sp, rng)
		tr.ids = append(tr.ids, g.IDs...)
		tr.lps = append(tr.lps, g.Logprobs...)
		for range g.IDs {
			tr.policy = append(tr.policy, true)
		}
		tr.response += g.Text
		kind, content := format.ParseAction(g.Text)
		switch kind {
		case format.ActionAnswer:
			tr.answer, tr.answered = content, true
			return tr
		case format.ActionSearch:
			tr.queries = append(tr.queries, content)
			if turn+1 < maxTurns {
				env(format.InfoBlock(docs(content)))
			}
		default:
			if turn+1 < maxTurns {
				env(lm.InvalidActionText)
			}
		}
	}
	return tr
}

// bm25Docs retrieves the top 3 passages of a query with the real index.
func bm25Docs(t testing.TB) func(string) []string {
	return func(q string) []string { return search(t, []string{q}, 3)[0] }
}
