package orchestrator

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hindsearch/hindsearch/clients/judge"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/rollout"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// opdFixture is six response tokens: policy (not search), two search
// tokens, an environment token, policy (not search), environment. The
// teacher-minus-student differences are 0.5, 2, -0.7, 3, -3, 1.
func opdFixture() (teacher, student []float64, isPolicy, isSearch []bool) {
	student = []float64{-1, -2.5, -0.2, -4, -0.5, -1}
	diff := []float64{0.5, 2, -0.7, 3, -3, 1}
	teacher = make([]float64, len(student))
	for i := range student {
		teacher[i] = student[i] + diff[i]
	}
	isPolicy = []bool{true, true, true, false, true, false}
	isSearch = []bool{false, true, true, false, false, false}
	return
}

func TestOPDTermLossAndBroadcast(t *testing.T) {
	const c = 1.5
	cases := []struct {
		loss, broadcast string
		want            []float64
	}{
		{"clamp", "search", []float64{0, 1.5, 0, 0, 0, 0}},
		{"clamp", "response", []float64{0.5, 1.5, 0, 0, 0, 0}},
		// mean over the 4 policy tokens of (0.5, 1.5, 0, 0) = 0.5.
		{"clamp", "trajectory", []float64{0.5, 0.5, 0.5, 0, 0.5, 0}},
		{"reverse_kl", "search", []float64{0, 1.5, -0.7, 0, 0, 0}},
		{"reverse_kl", "response", []float64{0.5, 1.5, -0.7, 0, -1.5, 0}},
		// mean of (0.5, 1.5, -0.7, -1.5) = -0.05.
		{"reverse_kl", "trajectory", []float64{-0.05, -0.05, -0.05, 0, -0.05, 0}},
		{"none", "search", make([]float64, 6)},
		{"none", "response", make([]float64, 6)},
		{"none", "trajectory", make([]float64, 6)},
	}
	for _, tc := range cases {
		teacher, student, isPolicy, isSearch := opdFixture()
		got := OPDTerm(teacher, student, isPolicy, isSearch, tc.loss, tc.broadcast, c)
		if len(got) != len(tc.want) {
			t.Fatalf("%s/%s: %d terms, want %d", tc.loss, tc.broadcast, len(got), len(tc.want))
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-12 {
				t.Errorf("%s/%s: term %d = %v, want %v (all: %v)", tc.loss, tc.broadcast, i, got[i], tc.want[i], got)
			}
		}
	}
}

func TestOPDTermBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 200; iter++ {
		n := 1 + rng.IntN(40)
		teacher, student := make([]float64, n), make([]float64, n)
		isPolicy, isSearch := make([]bool, n), make([]bool, n)
		for i := range n {
			teacher[i], student[i] = -10*rng.Float64(), -10*rng.Float64()
			isPolicy[i] = rng.IntN(3) > 0
			isSearch[i] = isPolicy[i] && rng.IntN(2) == 0
		}
		c := 0.1 + 3*rng.Float64()
		for _, loss := range []string{"clamp", "reverse_kl", "none"} {
			for _, b := range []string{"search", "response", "trajectory"} {
				d := OPDTerm(teacher, student, isPolicy, isSearch, loss, b, c)
				for i, v := range d {
					switch {
					case !isPolicy[i] && v != 0:
						t.Fatalf("%s/%s: environment token %d got %v", loss, b, i, v)
					case b == "search" && !isSearch[i] && v != 0:
						t.Fatalf("%s/%s: non-search token %d got %v", loss, b, i, v)
					case loss == "none" && v != 0:
						t.Fatalf("none/%s: token %d got %v", b, i, v)
					case loss == "clamp" && (v < 0 || v > c):
						t.Fatalf("clamp/%s: token %d = %v outside [0, %v]", b, i, v, c)
					case loss == "reverse_kl" && (v < -c || v > c):
						t.Fatalf("reverse_kl/%s: token %d = %v outside [-%v, %v]", b, i, v, c, c)
					}
				}
			}
		}
	}
}

func TestRedactGold(t *testing.T) {
	cases := []struct {
		name, critique string
		golds          []string
		want           string
	}{
		{"plain", "Search for Paris instead.", []string{"Paris"}, "Search for [answer] instead."},
		{"case-insensitive", "Search for PARIS or paris.", []string{"Paris"}, "Search for [answer] or [answer]."},
		{"gold trimmed", "Search for Paris.", []string{"  Paris "}, "Search for [answer]."},
		{"word boundary", "Parisian comparison Paris2 Paris", []string{"paris"}, "Parisian comparison Paris2 [answer]"},
		{"start and end", "Paris is it, Paris", []string{"Paris"}, "[answer] is it, [answer]"},
		{"punctuation around", `query "Paris" (Paris)`, []string{"Paris"}, `query "[answer]" ([answer])`},
		{"one separator apart", "Paris Paris/Paris", []string{"Paris"}, "[answer] [answer]/[answer]"},
		{"multi-word gold", "search Barack Obama, then Obama", []string{"Barack Obama", "Obama"}, "search [answer], then [answer]"},
		{"yes untouched", "Say yes if unsure, YES.", []string{"yes"}, "Say yes if unsure, YES."},
		{"no untouched", "No, search again.", []string{"No"}, "No, search again."},
		{"one character untouched", "Search for 5 and a.", []string{"5", "a"}, "Search for 5 and a."},
		{"one multi-byte character untouched", "Search é.", []string{"é"}, "Search é."},
		{"dot is literal", "the U.S. army, not USxS", []string{"U.S."}, "the [answer] army, not USxS"},
		{"dot gold absent", "search axb", []string{"a.b"}, "search axb"},
		{"plus signs", "learn C++ now, not C", []string{"C++"}, "learn [answer] now, not C"},
		{"brackets and stars", "try [a*b] (x|y) $1 now", []string{"[a*b]", "(x|y)", "$1"}, "try [answer] [answer] [answer] now"},
		{"backslash", `path C:\dir here`, []string{`C:\dir`}, "path [answer] here"},
		{"unicode boundary", "Zürichsee vs Zürich.", []string{"zürich"}, "Zürichsee vs [answer]."},
		{"no golds", "Search for Paris.", nil, "Search for Paris."},
		{"empty gold", "Search for Paris.", []string{""}, "Search for Paris."},
		{"empty critique", "", []string{"Paris"}, ""},
	}
	for _, c := range cases {
		if got := RedactGold(c.critique, c.golds); got != c.want {
			t.Errorf("%s: RedactGold(%q, %q) = %q, want %q", c.name, c.critique, c.golds, got, c.want)
		}
	}
}

func TestCheckCritique(t *testing.T) {
	cases := []struct {
		c    string
		max  int
		want string // substring of the reason; "" = usable
	}{
		{"", 100, "empty critique"},
		{" \n\t ", 100, "empty critique"},
		{strings.Repeat("a", 11), 10, "critique of 11 characters is over hindsight.max_critique_chars (10)"},
		{strings.Repeat("a", 10), 10, ""},
		{"  " + strings.Repeat("a", 10) + "\n", 10, ""},
		{strings.Repeat("é", 9) + "a", 10, ""}, // characters, not bytes
		{strings.Repeat("é", 10) + "a", 10, "critique of 11 characters"},
		{"Use <search> author </search>.", 100, "malformed critique: it contains agent tags"},
		{"The <answer> is wrong.", 100, "agent tags"},
		{"Ignore <information>.", 100, "agent tags"},
		{"123 !!! 456", 100, "malformed critique: no words"},
		{"—…", 100, "no words"},
		{`Search for "Hamlet author" instead.`, 100, ""},
	}
	for _, c := range cases {
		got := checkCritique(c.c, c.max)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("checkCritique(%q, %d) = %q, want %q", c.c, c.max, got, c.want)
		}
	}
}

func TestJudgePrompt(t *testing.T) {
	tmpl, err := ParseJudgePrompt("")
	if err != nil {
		t.Fatal(err)
	}
	resp := "\n<search> hamlet </search>\n\n<information>Doc 1(Title: x) y</information>\n\n<answer> Marlowe </answer>  \n"
	got, err := JudgePrompt(tmpl, "  who wrote hamlet ", []string{"Shakespeare", "William Shakespeare"}, resp)
	if err != nil {
		t.Fatal(err)
	}
	traj := "<search> hamlet </search>\n\n<information>Doc 1(Title: x) y</information>\n\n<answer> Marlowe </answer>"
	want := "Question: who wrote hamlet?\nGold answer(s): Shakespeare | William Shakespeare\nTrajectory:\n" + traj + "\n\nWrite a short"
	if !strings.Contains(got, want) {
		t.Errorf("with golds: want %q in\n%s", want, got)
	}
	if !strings.HasPrefix(got, "You review the work of a search agent") || !strings.HasSuffix(got, "Do not state the answer itself.") {
		t.Errorf("with golds: unexpected start or end:\n%s", got)
	}

	got, err = JudgePrompt(tmpl, "who wrote hamlet?", nil, resp)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "Gold answer") || strings.Contains(got, "Shakespeare") {
		t.Errorf("without golds: the gold line is present:\n%s", got)
	}
	if want := "Question: who wrote hamlet?\nTrajectory:\n" + traj + "\n\n"; !strings.Contains(got, want) {
		t.Errorf("without golds: want %q in\n%s", want, got)
	}
	got2, _ := JudgePrompt(tmpl, "who wrote hamlet?", []string{}, resp)
	if got2 != got {
		t.Error("an empty gold list must render like nil")
	}
}

func TestParseJudgePrompt(t *testing.T) {
	tmpl, err := ParseJudgePrompt(`Q={{.Question}} G={{join .Golds ","}} T={{.Trajectory}}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := JudgePrompt(tmpl, "q", []string{"a", "b"}, " t ")
	if err != nil || got != "Q=q? G=a,b T=t" {
		t.Errorf("custom prompt = %q, %v", got, err)
	}
	for _, bad := range []string{"{{.Question", "{{if .Golds}}x", "{{nosuchfunc .Question}}", "{{.NoSuchField}}"} {
		_, err := ParseJudgePrompt(bad)
		if err == nil || !strings.HasPrefix(err.Error(), "hindsight.prompt: ") {
			t.Errorf("ParseJudgePrompt(%q) = %v, want an error naming hindsight.prompt", bad, err)
		}
	}
}

// fakeJudge answers every chat with reply (or err) and records requests.
type fakeJudge struct {
	mu    sync.Mutex
	reply string
	err   error
	reqs  []judge.ChatRequest
}

func (j *fakeJudge) Chat(_ context.Context, req judge.ChatRequest) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.reqs = append(j.reqs, req)
	return j.reply, j.err
}

func (j *fakeJudge) URL() string { return "http://judge.invalid" }

func TestHinterCritique(t *testing.T) {
	tmpl, err := ParseJudgePrompt("")
	if err != nil {
		t.Fatal(err)
	}
	traj := &rollout.Trajectory{Step: 2, Group: 3, Sample: 1, Question: dataset.Question{Question: "who wrote hamlet", Golds: []string{"Shakespeare"}},
		Response: "<answer> Marlowe </answer>"}
	j := &fakeJudge{reply: "  Search for \"Hamlet author\", not Shakespeare's rivals; Shakespeare wrote it. \n"}
	h := &hinter{judge: j, prompt: tmpl, maxTokens: 64, seed: 9, gold: true, redact: true, maxChars: 500, hint: "Hint: {critique}\n"}

	c, why, err := h.critique(context.Background(), traj)
	if err != nil || why != "" {
		t.Fatalf("critique: %q, %q, %v", c, why, err)
	}
	if want := `Search for "Hamlet author", not [answer]'s rivals; [answer] wrote it.`; c != want {
		t.Errorf("critique = %q, want %q (trimmed and redacted)", c, want)
	}
	if got := h.hintText(c); got != "Hint: "+c+"\n" {
		t.Errorf("hintText = %q", got)
	}
	req := j.reqs[0]
	if len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Role != "user" ||
		!strings.Contains(req.Messages[1].Content, "Gold answer(s): Shakespeare") || req.MaxTokens != 64 {
		t.Errorf("judge request = %+v", req)
	}
	if req.Seed == nil || *req.Seed != roles.Seed(9, 2, 3, 1, 7) {
		t.Errorf("judge seed = %v, want seedFor(run seed, step, group, sample, 7)", req.Seed)
	}

	// No-gold ablation: the judge does not see the golds, redaction still
	// applies.
	h.gold = false
	if _, _, err := h.critique(context.Background(), traj); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(j.reqs[1].Messages[1].Content, "Shakespeare") {
		t.Error("the no-gold ablation leaked the gold answer to the judge")
	}

	// Unusable critiques come back with a reason, not an error.
	j.reply = "<search> x </search>"
	if c, why, err := h.critique(context.Background(), traj); err != nil || !strings.Contains(why, "agent tags") || c == "" {
		t.Errorf("malformed critique: %q, %q, %v", c, why, err)
	}
	// A judge failure is an error.
	j.err = errors.New("boom")
	if _, _, err := h.critique(context.Background(), traj); err == nil || !strings.Contains(err.Error(), "judge critique: boom") {
		t.Errorf("judge error: %v", err)
	}
}

func TestHindsightDensityCountsFailedTrajectoriesAndSearchTokens(t *testing.T) {
	all := []*rollout.Trajectory{
		{Reward: 1, OPD: []float64{5, 5}, Search: []bool{true, true}},                        // solved: ignored
		{Reward: 0, OPD: []float64{0, 0.2, 0.4, 0}, Search: []bool{false, true, true, true}}, // non-zero
		{Reward: 0, OPD: []float64{0, 0}, Search: []bool{true, true}},                        // critiqued, all zero
		{Reward: 0}, // no critique
	}
	share, mean := hindsightDensity(all)
	if math.Abs(share-1.0/3) > 1e-12 {
		t.Errorf("share %v, want 1/3", share)
	}
	if math.Abs(mean-0.6/5) > 1e-12 {
		t.Errorf("search mean %v, want 0.12", mean)
	}
	if s, m := hindsightDensity(nil); s != 0 || m != 0 {
		t.Errorf("no trajectories gave %v %v", s, m)
	}
}

// scoreRecorder records the sequences a teacher scores.
type scoreRecorder struct {
	policy.Policy
	mu   sync.Mutex
	seqs [][]int
}

func (s *scoreRecorder) Score(_ context.Context, _ string, seq []int) ([]float64, error) {
	s.mu.Lock()
	s.seqs = append(s.seqs, slices.Clone(seq))
	s.mu.Unlock()
	out := make([]float64, len(seq))
	for i := 1; i < len(seq); i++ {
		out[i] = -0.05
	}
	return out, nil
}

// Under broadcast search the teacher scores the response up to its last
// search token and no further (the span rollout.SearchTokenMask marks;
// rollout's TestSearchSpanIgnoresPlaceholderTextOffsets checks the mask
// against a vLLM with placeholder offsets), and the term lands on search
// tokens only.
func TestTeacherScoresUpToTheLastSearchToken(t *testing.T) {
	tr := &rollout.Trajectory{
		Tokens:   []int{1, 2, 3, 4, 5, 6, 7, 8},
		Policy:   []bool{true, true, true, true, false, false, true, true},
		Search:   []bool{false, true, true, true, false, false, false, false},
		Logprobs: []float64{-1, -1, -1, -1, 0, 0, -1, -1},
	}
	prompt := []int{100, 101, 102}
	rec := &scoreRecorder{}
	h := &hinter{loss: recipes.HindsightLossClamp, broadcast: recipes.BroadcastSearch, clamp: 1}
	opd, err := h.opd(context.Background(), tr, prompt, rec, "m", tr.Logprobs)
	if err != nil {
		t.Fatal(err)
	}
	lastSearch := 3
	if len(rec.seqs) != 1 || len(rec.seqs[0]) != len(prompt)+lastSearch+1 {
		t.Fatalf("teacher scored %d sequences, the first %v; want one of %d tokens (prompt %d + up to the last search token)",
			len(rec.seqs), rec.seqs, len(prompt)+lastSearch+1, len(prompt))
	}
	for i, d := range opd {
		if (d != 0) != tr.Search[i] {
			t.Errorf("OPD term %v on token %d (search %v)", d, i, tr.Search[i])
		}
	}
}

// The siblings hint lists the group's other trajectories in sample order,
// each as its searches in order and Correct or Incorrect, no answers.
func TestSiblingsHint(t *testing.T) {
	search := func(q string) rollout.Turn { return rollout.Turn{Action: format.ActionSearch, Content: q} }
	group := []*rollout.Trajectory{
		{Sample: 0, Reward: 0, Turns: []rollout.Turn{search("acme founder"), {Action: format.ActionAnswer, Content: "Bob"}}},
		{Sample: 1, Reward: 1, Turns: []rollout.Turn{search("acme founder"), search("jane doe birthplace"), {Action: format.ActionAnswer, Content: "Paris"}}},
		{Sample: 2, Reward: 0, Turns: []rollout.Turn{{Action: format.ActionAnswer, Content: "Rome"}}},
	}
	got := SiblingsHint("Others:\n{siblings}", group, group[0])
	want := "Others:\n- Correct: \"acme founder\" then \"jane doe birthplace\"\n- Incorrect: no search"
	if got != want {
		t.Errorf("hint\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(got, "Paris") || strings.Contains(got, "Rome") {
		t.Error("the hint shows an answer")
	}
}

// judgeCounter counts the judge's requests.
type judgeCounter struct {
	judge.Judge
	n atomic.Int64
}

func (j *judgeCounter) Chat(ctx context.Context, req judge.ChatRequest) (string, error) {
	j.n.Add(1)
	return j.Judge.Chat(ctx, req)
}

// runCountingJudge runs r (runRecipe) with its judge's requests counted,
// and returns the summary, the output, the requests and the OPD tokens of
// all its steps.
func runCountingJudge(t *testing.T, r *recipes.Recipe) (sum *Summary, out string, requests int64, opd int) {
	t.Helper()
	var jc *judgeCounter
	sum, out = runRecipeWith(t, r, 1, func(deps *roles.Deps, _ *setup.Embedded) {
		jc = &judgeCounter{Judge: deps.Judge}
		deps.Judge = jc
	})
	for _, s := range sum.Steps {
		opd += s.OPDTokens
	}
	return sum, out, jc.n.Load(), opd
}

// hindsight.hint siblings: no judge request, and still hints and OPD terms
// on failed trajectories (all-fail groups included), recorded as sibling
// hints in the kept trajectories.
func TestSiblingsHintRun(t *testing.T) {
	r := testRecipe(t, "", "hindsight.hint=siblings", "train.steps=2", "eval.datasets.nq=", "eval.datasets.hotpotqa=")
	sum, out, requests, opd := runCountingJudge(t, r)
	critiques := 0
	for _, s := range sum.Steps {
		critiques += s.Critiques
	}
	if requests != 0 || critiques == 0 || opd == 0 || !strings.Contains(out, "hint=siblings") {
		t.Fatalf("%d judge requests, %d sibling hints, %d OPD tokens\n%s", requests, critiques, opd, out)
	}
	trajs, err := (&results.RunDir{Path: r.Output.Dir}).ReadTrajectories(1)
	if err != nil {
		t.Fatal(err)
	}
	hinted := 0
	for _, tr := range trajs {
		if tr.Critique != "" {
			hinted++
			if tr.HintFrom != recipes.HintSiblings || !strings.Contains(tr.Critique, "Other attempts at this question") {
				t.Errorf("trajectory %s: hint from %q: %q", tr.ID, tr.HintFrom, tr.Critique)
			}
		}
	}
	if hinted == 0 {
		t.Error("no kept trajectory has a sibling hint")
	}
}

// FirstWrongSearch reads the "Step N" line the earliest prompt asks for,
// in the forms judges write it, and leaves a critique without one whole.
func TestFirstWrongSearch(t *testing.T) {
	for _, c := range []struct {
		in, rest string
		step     int
	}{
		{"Step 2\nSearch for \"X\".", "Search for \"X\".", 2},
		{"**Step 1.**\n\nSearch for \"X\".", "Search for \"X\".", 1},
		{"  step 3:\nSearch.", "Search.", 3},
		{"Search for \"X\" at step 2.", "Search for \"X\" at step 2.", 0},
		{"Step two\nSearch.", "Step two\nSearch.", 0},
	} {
		step, rest := FirstWrongSearch(c.in)
		if step != c.step || rest != c.rest {
			t.Errorf("%q: step %d, rest %q; want %d, %q", c.in, step, rest, c.step, c.rest)
		}
	}
}

// hindsight.broadcast earliest: the judge is asked for the first wrong
// search, the term lands on that turn's search tokens only (at most one
// search turn a trajectory), and critiques that name no search of their
// trajectory are counted, never fatal.
func TestBroadcastEarliestRun(t *testing.T) {
	r := testRecipe(t, "", "hindsight.broadcast=earliest", "train.steps=2", "eval.datasets.nq=", "eval.datasets.hotpotqa=",
		"output.trajectory_steps=0")
	sum, out, requests, opd := runCountingJudge(t, r)
	unnamed := 0
	for _, s := range sum.Steps {
		unnamed += s.EarliestUnnamed
	}
	if requests == 0 || opd == 0 || !strings.Contains(out, "critiques named no search (no term)") {
		t.Fatalf("%d judge requests, %d OPD tokens, %d unnamed\n%s", requests, opd, unnamed, out)
	}
	named := 0
	for step := 1; step <= 2; step++ {
		trajs, err := (&results.RunDir{Path: r.Output.Dir}).ReadTrajectories(step)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trajs {
			turns := map[int]bool{}
			for j, d := range tr.OPD {
				if d == 0 {
					continue
				}
				k := 0
				for _, turn := range tr.Turns {
					if turn.Action == format.ActionSearch {
						k++
						if j >= turn.From && j < turn.To {
							turns[k] = true
						}
					}
				}
			}
			if len(turns) > 1 || len(turns) == 1 && !turns[tr.FirstWrongSearch] {
				t.Errorf("trajectory %s: term on search turns %v, the critique named %d", tr.ID, turns, tr.FirstWrongSearch)
			}
			if tr.FirstWrongSearch > 0 {
				named++
			}
		}
	}
	if named == 0 {
		t.Error("no critique named a search")
	}
	t.Logf("%d OPD tokens, %d critiques named no search", opd, unnamed)
}
