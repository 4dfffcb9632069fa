package lm

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
)

// recognised returns the candidates of a state whose answer_recognised
// feature is on.
func recognised(st turnState) []string {
	var out []string
	for _, fc := range answerFeatures(st) {
		if fc.phi[PAnswerRecognised] != 0 {
			out = append(out, fc.content)
		}
	}
	return out
}

// TestReadingSkillNeedsThePassage checks the reading skill
// (Model.SetAnswers): a gold answer in a passage the agent read is
// recognised, and that is the only way it is used. Closed-book, with
// unrelated passages, or for a question the model was not given, nothing
// is recognised; with the judge's gold passage read, P(gold | answer)
// rises well above the same model without the skill.
func TestReadingSkillNeedsThePassage(t *testing.T) {
	f := getFixture(t)
	blind := NewModel(f.tk, 1e-6) // no answers: no reading skill
	n := 60
	if raceEnabled || testing.Short() {
		n = 30 // the BM25 index holds the first questions' passages only
	}
	qs := evalQuestions(f, n)
	judge := NewJudge(f.corpus)
	var titles, far []string
	for i, q := range qs {
		title := judge.goldPassage(judgeInput{question: q.Q, golds: q.Answers})
		if title == "" {
			title = q.Q
		}
		titles = append(titles, title)
		far = append(far, qs[(i+len(qs)/2)%len(qs)].Q)
	}
	docsT, docsF := search(t, titles, 3), search(t, far, 3)
	params := InitialParams()
	// greedy is whether the most likely answer of a state is gold.
	greedy := func(st turnState, golds []string) bool {
		best, bl := "", math.Inf(-1)
		for _, c := range buildTurn(st, params, f.tk, Behaviour{}).answers {
			if c.logp > bl {
				best, bl = c.content, c.logp
			}
		}
		return format.ExactMatch(best, golds) == 1
	}
	recog, withSkill, without := 0, 0, 0
	for i, q := range qs {
		if r := recognised(answerState(f.model, q.Q, "", nil)); len(r) > 0 {
			t.Errorf("%q: closed-book, %v recognised", q.Q, r)
		}
		if r := recognised(answerState(f.model, q.Q, far[i], docsF[i])); len(r) > 0 {
			t.Errorf("%q: unrelated passages, %v recognised", q.Q, r)
		}
		if r := recognised(answerState(blind, q.Q, titles[i], docsT[i])); len(r) > 0 {
			t.Errorf("%q: a model without answers recognised %v", q.Q, r)
		}
		st := answerState(f.model, q.Q, titles[i], docsT[i])
		r := recognised(st)
		for _, c := range r {
			if format.ExactMatch(c, q.Answers) != 1 {
				t.Errorf("%q: %q recognised, not a gold answer %v", q.Q, c, q.Answers)
			}
			if !strings.Contains(" "+looseNorm(strings.Join(docsT[i], " "))+" ", " "+looseNorm(c)+" ") {
				t.Errorf("%q: %q recognised but no passage read holds it", q.Q, c)
			}
		}
		if len(r) > 0 {
			recog++
		}
		if greedy(st, q.Answers) {
			withSkill++
		}
		if greedy(answerState(blind, q.Q, titles[i], docsT[i]), q.Answers) {
			without++
		}
	}
	t.Logf("judge's gold passage read: gold recognised for %d/%d; the greedy answer is gold for %d with the skill, %d without", recog, len(qs), withSkill, without)
	if recog < len(qs)/3 {
		t.Errorf("gold recognised for %d/%d questions with the gold passage read, want >= 1/3", recog, len(qs))
	}
	if withSkill < 2*without || withSkill < len(qs)/5 {
		t.Errorf("greedy answer gold for %d/%d with the skill, %d without: want >= 1/5 and >= 2x", withSkill, len(qs), without)
	}
}

// TestReadingSkillYesNoAndOptionsNeedEveryEntity checks that yes/no and
// "A or B" answers are recognised only once passages about every entity
// (every option) of the question have been read.
func TestReadingSkillYesNoAndOptionsNeedEveryEntity(t *testing.T) {
	f := getFixture(t)
	m := NewModel(f.tk, 1e-6)
	cases := []struct {
		q, gold string
		one     string // a passage naming one entity only
		both    string // a passage naming both
	}{
		{"Are Chrysalis and Look both women's magazines?", "no",
			`"Chrysalis" Chrysalis is a magazine.`,
			`"Chrysalis" Chrysalis is a magazine; Look is another.`},
		{"Who was born first, Ulf Merbold or Pavel Alexandrov?", "Pavel Alexandrov",
			`"Ulf Merbold" Ulf Merbold was born in 1941.`,
			`"Ulf Merbold" Ulf Merbold was born in 1941, Pavel Alexandrov in 1896.`},
	}
	for _, c := range cases {
		m.SetAnswers(map[string][]string{c.q: {c.gold}})
		if r := recognised(answerState(m, c.q, "q", []string{c.one})); len(r) > 0 {
			t.Errorf("%q: one entity read, %v recognised", c.q, r)
		}
		r := recognised(answerState(m, c.q, "q", []string{c.both}))
		if len(r) != 1 || format.ExactMatch(r[0], []string{c.gold}) != 1 {
			t.Errorf("%q: both read, recognised %v, want [%s]", c.q, r, c.gold)
		}
	}
}

// TestTruncatedInformationBlockIsRead checks that an <information> block
// the rollout cut at rollout.max_obs_tokens (as Search-R1 does, losing the
// closing tag) is still read: its passages are the latest block, and the
// next turn's thought does not leak into the last passage.
func TestTruncatedInformationBlockIsRead(t *testing.T) {
	f := getFixture(t)
	q := f.hotpot[0]
	docs := search(t, []string{q.Q}, 3)[0]
	block := f.tk.Encode(format.InfoBlock(docs))
	cut, ok := f.tk.Decode(block[:len(block)/2])
	if !ok {
		t.Fatal("the cut block does not decode")
	}
	for _, next := range []string{"", thoughtSearch + "<search> x </search>"} {
		text := promptText(q.Q, "") + thoughtSearch + "<search> " + q.Q + " </search>" + cut + next
		st := parseState(text)
		if len(st.blocks) != 1 || len(st.blocks[0]) == 0 {
			t.Fatalf("next %q: %d blocks read from a cut block, want 1 with passages", next, len(st.blocks))
		}
		last := st.blocks[0][len(st.blocks[0])-1]
		if strings.Contains(last.text, "<think>") || strings.Contains(last.text, "<search>") {
			t.Errorf("next %q: the next turn leaked into the last passage: %q", next, last.text)
		}
		if got, want := len(st.searches), 1+strings.Count(next, "<search>"); got != want {
			t.Errorf("next %q: %d searches read, want %d", next, got, want)
		}
	}
}

// TestAnswerSpans checks the span extraction the answer candidates come
// from: sentences do not end at initials or abbreviations, names do not
// run across punctuation, "A and B" gives each side, an honorific is
// dropped, and "what kind" questions get the noun phrase after "is a".
func TestAnswerSpans(t *testing.T) {
	sents := sentences("H. L. Mencken was born in Baltimore. He moved to St. Louis later! Was it? Yes")
	if want := []string{"H. L. Mencken was born in Baltimore.", " He moved to St. Louis later!", " Was it?", " Yes"}; !slices.Equal(sents, want) {
		t.Errorf("sentences = %q, want %q", sents, want)
	}
	texts := func(sent string, kinds bool) []string {
		var out []string
		for _, sp := range spans(sent, kinds) {
			out = append(out, sp.text+"/"+sp.kind)
		}
		return out
	}
	for _, c := range []struct {
		sent  string
		kinds bool
		want  []string
	}{
		{"The bid was presented by Frank Lowy, Ben Buckley and Elle Macpherson.", false,
			[]string{"Frank Lowy/cap", "Ben Buckley and Elle Macpherson/cap", "Ben Buckley/cap", "Elle Macpherson/cap"}},
		{"It was directed by Mark Neveldine and Brian Taylor in 2009.", false,
			[]string{"2009/year", "Mark Neveldine and Brian Taylor/cap", "Mark Neveldine/cap", "Brian Taylor/cap"}},
		{"Dr Ulf Merbold is a German physicist.", true,
			[]string{"Dr Ulf Merbold/cap", "Ulf Merbold/cap", "German/cap", "German physicist/isa", "physicist/isa"}},
		{"Opry Mills is a super-regional shopping mall in Nashville.", true,
			[]string{"Opry Mills/cap", "Nashville/cap", "super-regional shopping mall/isa", "mall/isa"}},
	} {
		if got := texts(c.sent, c.kinds); !slices.Equal(got, c.want) {
			t.Errorf("spans(%q, %v) = %q, want %q", c.sent, c.kinds, got, c.want)
		}
	}
	if got := questionType("What profession does H. L. Mencken and Albert Camus have in common?"); got != "kind" {
		t.Errorf("questionType of a profession question = %q, want kind", got)
	}
	if stem("directed") != stem("director") || stem("born") != stem("birth") || stem("wife") != stem("married") {
		t.Error("stem: directed/director, born/birth, wife/married should share a stem")
	}
}

// TestBridgeEntities checks the word_bridge feature's source: in a
// passage about the question, the entities next to a relation word of the
// question (the bridge of a multi-hop question) are found, and nothing
// from passages about something else, from sentences without a relation
// word, or the question's own entities; the query vocabulary then holds
// the bridge's words with word_bridge on, and has none before any passage.
func TestBridgeEntities(t *testing.T) {
	f := getFixture(t)
	st := turnState{
		question: "Where was the director of the film Beatrice born?",
		searches: []string{"director of the film Beatrice"},
		blocks: [][]doc{{
			{title: "Beatrice (1987 film)", text: "Beatrice is a 1987 French film directed by Bertrand Tavernier. It stars Julie Delpy and Bernard Pierre Donnadieu.", rank: 1},
			{title: "Paris Opera", text: "The Paris Opera is directed by Alexander Neef.", rank: 2},
		}},
	}
	got := bridgeEntities(st)
	if !slices.Contains(got, "Bertrand Tavernier") {
		t.Errorf("bridge entities %q lack the director the passage names", got)
	}
	for _, bad := range []string{"Beatrice", "Julie Delpy", "Bernard Pierre Donnadieu", "Alexander Neef", "Paris Opera"} {
		if slices.Contains(got, bad) {
			t.Errorf("bridge entities %q hold %q", got, bad)
		}
	}
	qm := newQueryModel(st, InitialParams(), f.tk, thoughtSearch)
	bridge := map[string]bool{}
	for _, w := range qm.words {
		if w.phi[PWordBridge] != 0 {
			bridge[w.text] = true
		}
	}
	if !bridge["Bertrand"] || !bridge["Tavernier"] || bridge["Beatrice"] || bridge["director"] {
		t.Errorf("query words with word_bridge: %v, want Bertrand and Tavernier, not the question's words", bridge)
	}
	st.blocks, st.searches = nil, nil
	for _, w := range newQueryModel(st, InitialParams(), f.tk, thoughtSearch).words {
		if w.phi[PWordBridge] != 0 {
			t.Errorf("word %q has word_bridge before any passage was read", w.text)
		}
	}
}
