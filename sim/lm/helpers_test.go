package lm

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// sim's and sim/trainer's tests use a copy of trainSampling, trajectory,
// rollout and bm25Docs with exported names (sim/internal/lmtest, which lm's
// tests cannot import: it imports lm): keep the two alike.

// trainSampling is Search-R1's training sampling: temperature 1, no top-p
// or top-k, a turn ending at </search> or </answer>.
func trainSampling() Sampling {
	return Sampling{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 500, Stop: format.StopStrings, IncludeStopStr: true}
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
func rollout(m *Model, params Params, question, hint string, sp Sampling, rng *rand.Rand, maxTurns int, docs func(string) []string) trajectory {
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
				env(InvalidActionText)
			}
		}
	}
	return tr
}

// bm25Docs retrieves the top 3 passages of a query with the real index.
func bm25Docs(t testing.TB) func(string) []string {
	return func(q string) []string { return search(t, []string{q}, 3)[0] }
}

// turnModelFor builds the turn model Generate samples from after ctx (a
// context ending inside, or at the start of, a policy turn), and the turn's
// partial tokens.
func turnModelFor(t testing.TB, m *Model, params Params, ctx []int) (*turnModel, []int) {
	t.Helper()
	starts, prefixes, _ := m.segment(ctx)
	if len(starts) == 0 {
		t.Fatal("context has no turn start")
	}
	k := len(starts) - 1
	parts := buildTurn(m.state(prefixes[k]), params, m.tk, m.bh)
	return newTurnModel(parts, m.eps, m.tk.VocabSize(), m.eos), ctx[starts[k]:]
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// sampleTurn continues partial with the structured distribution of tm
// (no floor) until the turn ends, and returns the whole turn without its
// end-of-turn token.
func sampleTurn(tm *turnModel, partial []int, rng *rand.Rand) []int {
	turn := slices.Clone(partial)
	for len(turn) < 400 {
		d := tm.nextDist(turn)
		u, x := rng.Float64(), -1
		for _, id := range sortedKeys(d) {
			if u -= d[id]; u < 0 {
				x = id
				break
			}
		}
		if x < 0 {
			ks := sortedKeys(d)
			x = ks[len(ks)-1]
		}
		if x == tm.eos {
			break
		}
		turn = append(turn, x)
	}
	return turn
}

// searchTurn samples a whole search turn of tm (its header forced).
func searchTurn(t testing.TB, tm *turnModel, rng *rand.Rand) []int {
	t.Helper()
	if tm.search == nil {
		t.Fatal("the turn has no search branch")
	}
	return sampleTurn(tm, tm.search.header, rng)
}

// searchIDs are the ids of the search turn for query, as the policy
// writes it.
func searchIDs(tk *Tokenizer, query string) []int {
	return tk.Encode(thoughtSearch + "<search> " + query + " </search>" + searchTurnEnd)
}

// turnProb is the structured probability (no floor) of the whole turn ids
// under tm: the product of the next-token conditionals, and of the end of
// turn after an answer.
func turnProb(tm *turnModel, ids []int) float64 {
	p := 1.0
	for i := range ids {
		p *= tm.nextDist(ids[:i])[ids[i]]
	}
	return p
}

// queryOf is the query text of a search turn's ids ("" if none).
func queryOf(tk *Tokenizer, ids []int) string {
	s, _ := tk.Decode(ids)
	if m := reSearch.FindStringSubmatch(s); m != nil {
		return strings.TrimSpace(m[1])
	}
	return ""
}
