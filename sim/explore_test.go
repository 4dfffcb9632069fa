package sim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/orchestrator/format"
)

func TestExplore(t *testing.T) {
	t0 := time.Now()
	f := getFixture(t)
	t.Logf("fixture %v vocab %d", time.Since(t0), f.tk.VocabSize())
	t0 = time.Now()
	index(t)
	t.Logf("bm25 %v", time.Since(t0))
	q := f.hotpot[2]
	ids := f.tk.Encode(promptText(q.Q, ""))
	t0 = time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		f.model.Generate(InitialParams(), ids, Sampling{Temperature: 1, TopP: 1, TopK: -1, MaxTokens: 1}, rng)
	}
	t.Logf("2000 gen %v", time.Since(t0))
	// rates
	qs := evalQuestions(f, 60)
	var queries []string
	for _, q := range qs {
		queries = append(queries, q.Q)
	}
	res := search(t, queries, 3)
	hit, hitUnrel := 0, 0
	for i, q := range qs {
		for k, docs := range [][]string{res[i], res[(i+len(qs)/2)%len(qs)]} {
			text := promptText(q.Q, "") + thoughtSearch + "<search> " + q.Q + " </search>" + format.InfoBlock(docs)
			st := parseState(text)
			cands := buildCandidates(st, InitialParams(), f.tk)
			found := false
			pg := 0.0
			for _, c := range cands {
				if !c.isSearch && isAnswerGold(c.content, q.Answers) {
					found = true
					pg += math.Exp(c.logp)
				}
			}
			if found {
				if k == 0 {
					hit++
				} else {
					hitUnrel++
				}
			}
			if k == 0 {
				t.Logf("%q %v found=%v p=%.3g ncand=%d", q.Q, q.Answers, found, pg, len(cands))
			}
		}
	}
	t.Logf("hit %d unrel %d of %d", hit, hitUnrel, len(qs))
	judge := NewJudgeServer("j", "", f.corpus)
	for _, q := range qs[:10] {
		p := "Question: " + format.NormalizeQuestion(q.Q) + "\nGold answer(s): " + q.Answers[0] + "\nTrajectory:\n" + thoughtAnswer + "<answer> unknown </answer>"
		t.Log(judge.Critique(p))
		p = "Question: " + format.NormalizeQuestion(q.Q) + "\nTrajectory:\n" + thoughtAnswer + "<answer> unknown </answer>"
		t.Log(judge.Critique(p))
	}
}
