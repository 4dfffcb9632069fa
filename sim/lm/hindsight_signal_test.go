package lm

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// TestHindsightTermCarriesSignal trains the simulated policy on the
// hindsight term alone (no reward): for each question a first search turn
// is sampled, the simulated judge critiques it with the gold answer, and
// the parameters follow sum_t d_t grad log p_student(token t), where d_t is
// the clamped term max(0, min(1, lp_teacher - lp_student)) on the query's
// tokens, the teacher being the same parameters with the critique as a
// hint. The chance that a first search retrieves a passage holding a gold
// answer, on other questions, must rise; with the term's sign flipped it
// must not. The term carries the critique's signal only through the
// student's own tokens: the student's features never read the critique.
func TestHindsightTermCarriesSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("trains twice")
	}
	f := getFixture(t)
	judge := NewJudge(f.corpus)
	docs := bm25Docs(t)
	qs := evalQuestions(f, 160)
	train, held := qs[:80], qs[80:]
	const iters, lr, samples = 6, 1.0, 12
	retrieval := func(params Params) float64 {
		hits, n := 0.0, 0.0
		for i, q := range held {
			tm, _ := turnModelFor(t, f.model, params, f.tk.Encode(promptText(q.Q, "")))
			rng := rand.New(rand.NewPCG(uint64(i), 77))
			for k := 0; k < samples; k++ {
				n++
				query := queryOf(f.tk, searchTurn(t, tm, rng))
				for _, d := range docs(query) {
					if containsGold(d, q.Answers) {
						hits++
						break
					}
				}
			}
		}
		return hits / n
	}
	var trajectories, nonzero float64
	trainOn := func(sign float64) Params {
		params := InitialParams()
		for it := 0; it < iters; it++ {
			grad := make([]float64, NumParams)
			for i, q := range train {
				prompt := f.tk.Encode(promptText(q.Q, ""))
				tm, _ := turnModelFor(t, f.model, params, prompt)
				turn := searchTurn(t, tm, rand.New(rand.NewPCG(uint64(i), uint64(it))))
				text, _ := f.tk.Decode(turn)
				response := text + format.InfoBlock(docs(queryOf(f.tk, turn)))
				critique := judge.Critique(judgePrompt(q.Q, q.Answers, response))
				hinted := f.tk.Encode(promptText(q.Q, "Hint: "+critique+"\n"))
				student := f.model.Score(params, concat(prompt, turn))[len(prompt):]
				teacher := f.model.Score(params, concat(hinted, turn))[len(hinted):]
				// The query's tokens: after the search header.
				var pos []int
				var coef []float64
				for j := len(tm.search.header); j < len(turn); j++ {
					if d := math.Max(0, math.Min(1, teacher[j]-student[j])); d > 0 {
						pos = append(pos, len(prompt)+j)
						coef = append(coef, sign*d)
					}
				}
				trajectories++
				if len(pos) > 0 {
					nonzero++
				}
				if len(pos) > 0 {
					f.model.LogProbGrad(params, concat(prompt, turn), pos, coef, grad)
				}
			}
			for j := range params {
				params[j] += lr * grad[j] / float64(len(train))
			}
		}
		return params
	}
	before := retrieval(InitialParams())
	trained := trainOn(1)
	share := nonzero / trajectories
	flipped := trainOn(-1)
	after, afterFlipped := retrieval(trained), retrieval(flipped)
	t.Logf("search turns with a non-zero term: %.1f%%", 100*share)
	t.Logf("P(first search retrieves a gold passage) on held-out questions: %.3f before, %.3f after %d steps on the term, %.3f with its sign flipped",
		before, after, iters, afterFlipped)
	if share < 0.15 {
		t.Errorf("only %.1f%% of search turns have a non-zero term: the signal is too sparse", 100*share)
	}
	if !(after > before+0.03) {
		t.Errorf("training on the hindsight term alone: retrieval %.3f -> %.3f, want a clear rise", before, after)
	}
	if !(afterFlipped < after-0.03) {
		t.Errorf("flipped term: retrieval %.3f, not clearly below the right sign's %.3f", afterFlipped, after)
	}
}

// TestQueryIDsAreQwenEncodings checks that the query the policy composes
// word by word is the ids Qwen's tokenizer gives its text (each word's ids
// concatenated), so a re-tokenizing server or trainer sees the same tokens,
// and that every sampled query splits into the words it was drawn from.
func TestQueryIDsAreQwenEncodings(t *testing.T) {
	f := getFixture(t)
	rng := rand.New(rand.NewPCG(5, 5))
	n, off := 0, 0
	for qi, q := range f.hotpot[:60] {
		prompt := promptText(q.Q, "")
		if qi%3 == 1 {
			prompt = promptText(q.Q, "Hint: Search for \""+q.Answers[0]+" (film)\" first.\n")
		}
		ctx := f.tk.Encode(prompt)
		if qi%2 == 1 {
			// A second search, after passages: titles and entities join.
			ctx = concat(ctx, searchIDs(f.tk, q.Q), f.tk.Encode(format.InfoBlock(f.corpus[qi*7:qi*7+3])))
		}
		tm, _ := turnModelFor(t, f.model, InitialParams(), ctx)
		for k := 0; k < 8; k++ {
			turn := searchTurn(t, tm, rng)
			text, _ := f.tk.Decode(turn)
			n++
			if !slices.Equal(f.tk.Encode(text), turn) {
				off++
				t.Errorf("%q: sampled ids are not Qwen's encoding of their text", text)
			}
			query := queryOf(f.tk, turn)
			for _, w := range strings.Fields(query) {
				if _, ok := tm.search.byIDs[idsKey(f.tk.Encode(" "+w))]; !ok {
					t.Errorf("%q: word %q is not in the turn's query vocabulary", query, w)
				}
			}
			if len(strings.Fields(query)) > maxQueryWords {
				t.Errorf("%q: more than %d words", query, maxQueryWords)
			}
		}
	}
	t.Logf("%d sampled search turns, %d not canonical", n, off)
}
