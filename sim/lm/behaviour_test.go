package lm

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// The abnormal agent (sim.agent) writes each abnormal turn at about its
// rate, and what it samples is still what it scores: the trainer's
// logprobs of those turns are the sampler's.
func TestAbnormalAgentSamplesWhatItScores(t *testing.T) {
	f := getFixture(t)
	docs := bm25Docs(t)
	m := NewModel(f.tk, 1e-6)
	m.SetBehaviour(Behaviour{InvalidRate: 0.2, RepeatRate: 0.3, RambleRate: 0.1})
	params := InitialParams()
	params[PSearchBias] = 0.5
	sp := trainSampling()
	sp.MaxTokens = 200 // the ramble runs past it
	var turns, invalid, rambles, repeats, searchesAfterFirst int
	for i, q := range evalQuestions(f, 24) {
		rng := rand.New(rand.NewPCG(uint64(i), 17))
		tr := rollout(m, params, q.Q, "", sp, rng, 4, docs)
		got := m.Score(params, tr.ids)
		for _, p := range tr.policyPositions() {
			if math.Abs(got[p]-tr.lps[p]) > 1e-9 {
				t.Fatalf("question %d token %d (%q): sampled logprob %v, scored %v", i, p, f.tk.Piece(tr.ids[p]), tr.lps[p], got[p])
			}
		}
		turns += strings.Count(tr.response, "<think>")
		invalid += strings.Count(tr.response, invalidTurn)
		rambles += strings.Count(tr.response, "<think> Let me think")
		for k, q := range tr.queries {
			if k > 0 {
				searchesAfterFirst++
				if q == tr.queries[k-1] {
					repeats++
				}
			}
		}
	}
	if turns < 40 || invalid == 0 || rambles == 0 || repeats == 0 {
		t.Fatalf("%d turns: %d invalid, %d rambles, %d repeats of %d later searches", turns, invalid, rambles, repeats, searchesAfterFirst)
	}
	if r := float64(invalid) / float64(turns); r < 0.08 || r > 0.35 {
		t.Errorf("invalid turns %.2f of turns, want about 0.2", r)
	}
}

// The thoughts shrink with the parameters' distance from the base
// model's, to empty at ThinkCollapse, and stay whole without it.
func TestThoughtsCollapseWithDistance(t *testing.T) {
	b := Behaviour{ThinkCollapse: 2}
	p := InitialParams()
	if s, a := b.thoughts(p); s != thoughtSearch || a != thoughtAnswer {
		t.Errorf("at the base: %q %q", s, a)
	}
	p[PAnswerRank] += 1 // distance 1: half the words
	if s, _ := b.thoughts(p); s != "<think> I need </think>\n" {
		t.Errorf("at half the distance: %q", s)
	}
	p[PAnswerRank] += 1.5
	if s, a := b.thoughts(p); s != "<think> </think>\n" || a != s {
		t.Errorf("past it: %q %q", s, a)
	}
	if s, _ := (Behaviour{}).thoughts(p); s != thoughtSearch {
		t.Errorf("without collapse: %q", s)
	}
}
