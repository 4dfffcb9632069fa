package results

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeTrajFile writes lines as trajectories/step-NNNN.jsonl of d.
func writeTrajFile(t *testing.T, d *RunDir, step int, lines ...string) {
	t.Helper()
	if err := d.WriteFileAtomic(TrajectoriesFile(step), []byte(strings.Join(lines, "\n")+"\n")); err != nil {
		t.Fatal(err)
	}
}

func TestReadTrajectories(t *testing.T) {
	d := &RunDir{Path: t.TempDir()}
	if steps, err := d.TrajectorySteps(); err != nil || steps != nil {
		t.Fatalf("no trajectories/: %v, %v", steps, err)
	}
	_, err := d.ReadTrajectories(1)
	if !errors.Is(err, ErrNoTrajectories) || !strings.Contains(err.Error(), "the run kept none") {
		t.Errorf("empty run: %v", err)
	}

	writeTrajFile(t, d, 3,
		`{"id":"s3-a","step":3,"group":1,"sample":2,"question":{"id":"q1","question":"who?","golden_answers":["x","y"],"dataset":"nq"},`+
			`"model":"m","prompt_ids":[1],"tokens":[5,6,7],"policy":[true,false,true],"search":[true,false,false],"logprobs":[-1,0,-2],`+
			`"turns":[{"text":"<search> q </search>","action":"search","content":"q","titles":["T"],"finish":"stop"},{"text":"<answer> x </answer>","action":"answer","content":"x","finish":"stop"}],`+
			`"response":"r","answer":"x","answered":true,"finish":"answer","reward":1,"f1":1,"advantage":0.5,"opd":[0.25,0,0],"pieces":["<search>","","<answer>"],"unknown_field":1}`,
		``,
		`{"id":"s3-b","step":3,"tokens":[],"policy":[],"search":[],"reward":0,"critique_error":"judge down"}`)
	for _, name := range []string{"step-0010.jsonl", "step-12345.jsonl", "notes.txt", "step-x.jsonl"} {
		os.WriteFile(filepath.Join(d.Path, TrajectoriesDir, name), nil, 0o644)
	}
	steps, err := d.TrajectorySteps()
	if err != nil || !reflect.DeepEqual(steps, []int{3, 10, 12345}) {
		t.Errorf("steps %v, %v", steps, err)
	}

	trajs, err := d.ReadTrajectories(3)
	if err != nil {
		t.Fatal(err)
	}
	if len(trajs) != 2 {
		t.Fatalf("%d trajectories, want 2", len(trajs))
	}
	a := trajs[0]
	want := TrajectoryRecord{ID: "s3-a", Step: 3, Group: 1, Sample: 2,
		Question: TrajectoryQuestion{ID: "q1", Question: "who?", Golds: []string{"x", "y"}, Dataset: "nq"},
		Model:    "m", PromptIDs: []int{1}, Tokens: []int{5, 6, 7}, Policy: []bool{true, false, true}, Search: []bool{true, false, false},
		Logprobs: []float64{-1, 0, -2},
		Turns: []TurnRecord{{Text: "<search> q </search>", Action: "search", Content: "q", Titles: []string{"T"}, Finish: "stop"},
			{Text: "<answer> x </answer>", Action: "answer", Content: "x", Finish: "stop"}},
		Response: "r", Answer: "x", Answered: true, Finish: "answer", Reward: 1, F1: 1, Advantage: 0.5,
		OPD: []float64{0.25, 0, 0}, Pieces: []string{"<search>", "", "<answer>"}}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("record\n got %+v\nwant %+v", a, want)
	}
	if a.Failed() || !trajs[1].Failed() || trajs[1].CritiqueError != "judge down" {
		t.Errorf("failed: %v %v", a.Failed(), trajs[1].Failed())
	}
	if got := a.PolicySpans(); !reflect.DeepEqual(got, [][2]int{{0, 1}, {2, 3}}) {
		t.Errorf("spans %v", got)
	}

	_, err = d.ReadTrajectories(4)
	if !errors.Is(err, ErrNoTrajectories) || !strings.Contains(err.Error(), "no trajectories for step 4 (steps with trajectories: 3, 10, 12345)") {
		t.Errorf("missing step: %v", err)
	}
}

func TestReadTrajectoriesErrors(t *testing.T) {
	d := &RunDir{Path: t.TempDir()}
	file := filepath.Join(d.Path, TrajectoriesFile(1))
	for _, c := range []struct {
		line, want string
	}{
		{`{"id":"a","tokens":[1],"policy":[true]`, ":2: unexpected end of JSON input"},
		{`{"id":"a","reward":"high"}`, ":2: json: cannot unmarshal string"},
		{`{"id":"a","tokens":[1,2],"policy":[true,true],"search":[false]}`, `:2: trajectory "a": 1 search values for 2 tokens`},
		{`{"id":"a","tokens":[1],"policy":[true],"search":[false],"opd":[0,1]}`, `:2: trajectory "a": 2 opd values for 1 tokens`},
		{`{"id":"a","tokens":[1],"policy":[true],"search":[false],"pieces":["x","y"]}`, `:2: trajectory "a": 2 pieces values for 1 tokens`},
	} {
		writeTrajFile(t, d, 1, `{"id":"ok"}`, c.line)
		_, err := d.ReadTrajectories(1)
		if err == nil || !strings.Contains(err.Error(), file+c.want) {
			t.Errorf("%s: error %v, want %q", c.line, err, file+c.want)
		}
	}
}

func TestStepRanges(t *testing.T) {
	for _, c := range []struct {
		steps []int
		want  string
	}{
		{nil, ""}, {[]int{4}, "4"}, {[]int{1, 2}, "1, 2"}, {[]int{1, 2, 3, 4, 8, 10, 11, 12}, "1-4, 8, 10-12"},
	} {
		if got := StepRanges(c.steps); got != c.want {
			t.Errorf("StepRanges(%v) = %q, want %q", c.steps, got, c.want)
		}
	}
}

func TestRenderTrajectory(t *testing.T) {
	// Two turns: a search with OPD terms on three of its tokens (two runs),
	// environment tokens, then an answer.
	tr := &TrajectoryRecord{ID: "t1", Step: 2, Model: "m",
		Question: TrajectoryQuestion{ID: "q", Question: "who wrote hallelujah", Golds: []string{"Leonard Cohen"}, Dataset: "nq"},
		Tokens:   []int{1, 2, 3, 4, 5, 6, 7, 8, 9},
		Pieces:   []string{"<search>", " who", " wrote", " hallelujah", " </search>", "", "<answer>", " Cohen", " </answer>"},
		Policy:   []bool{true, true, true, true, true, false, true, true, true},
		Search:   []bool{true, true, true, true, true, false, false, false, false},
		OPD:      []float64{0, 0.5, 0.5, 0.004, 0, 0, 0, 0, 0},
		Turns: []TurnRecord{{Text: "<search> who wrote hallelujah </search>", Action: "search", Content: "who wrote hallelujah", Titles: []string{"Hallelujah"}, Finish: "stop"},
			{Text: "<answer> Cohen </answer>", Action: "answer", Content: "Cohen", Finish: "stop"}},
		Answer: "Cohen", Answered: true, Finish: "answer", Reward: 0, F1: 0.67, Advantage: -0.25, Critique: "Give the full name."}
	var b strings.Builder
	if err := RenderTrajectory(&b, tr, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	want := `=== t1 · step 2 · group 0 · sample 0 · model m
    question (nq q): who wrote hallelujah
    gold: Leonard Cohen
turn 1 · search
    <search> ⟦who wrote⟧⟨+0.50⟩ ⟦hallelujah⟧⟨+4.0e-03⟩ </search>
    query: who wrote hallelujah
    retrieved: Hallelujah
turn 2 · answer
    <answer> Cohen </answer>
    answer: Cohen
failed · reward 0.00 · F1 0.67 · advantage -0.25 · finish answer · answer "Cohen"
    critique: Give the full name.
    opd: non-zero on 3 of 5 search tokens, sum +1.00, range +4.0e-03 to +0.50
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}

	// A siblings hint (hindsight.hint siblings) is named as one.
	sib := *tr
	sib.HintFrom, sib.Critique = "siblings", "- Correct: \"leonard cohen songs\""
	b.Reset()
	if err := RenderTrajectory(&b, &sib, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "    sibling hint: - Correct: \"leonard cohen songs\"\n") || strings.Contains(b.String(), "critique:") {
		t.Errorf("siblings hint rendered:\n%s", b.String())
	}

	// Narrow: text wraps at spaces, continuation lines indented.
	b.Reset()
	if err := RenderTrajectory(&b, tr, RenderOptions{Width: 30}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\n    <search> ⟦who\n    wrote⟧⟨+0.50⟩\n    ⟦hallelujah⟧⟨+4.0e-03⟩\n    </search>\n") {
		t.Errorf("wrapped at 30:\n%s", b.String())
	}

	// Without pieces: the turn text whole, the OPD per turn. Control
	// characters from the model are shown, not sent to the terminal.
	tr.Pieces = nil
	tr.Turns[1].Text = "<answer> Co\x1b[2Jhen </answer>"
	b.Reset()
	if err := RenderTrajectory(&b, tr, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Errorf("escape character in plain output:\n%q", b.String())
	}
	for _, w := range []string{
		"turn 1 · search\n    <search> who wrote hallelujah </search>\n    opd: non-zero on 3 of 5 search tokens, sum +1.00, range +4.0e-03 to +0.50\n",
		"turn 2 · answer\n    <answer> Co\u241b[2Jhen </answer>\n    answer: Cohen\n",
		"(no per-token text in this record: OPD summarised per turn)",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("without pieces, output lacks %q:\n%s", w, b.String())
		}
	}
}

func TestRenderWhitespaceRun(t *testing.T) {
	// A term on a whitespace token alone is shown with a visible symbol.
	tr := &TrajectoryRecord{ID: "w", Tokens: []int{1, 2, 3, 4}, Pieces: []string{"<search>", " ", "x", " </search>"},
		Policy: []bool{true, true, true, true}, Search: []bool{true, true, true, true}, OPD: []float64{0, 0.9, 0, 0},
		Turns: []TurnRecord{{Text: "<search> x </search>", Action: "search", Content: "x"}}}
	for _, c := range []struct {
		color bool
		want  string
	}{
		{false, "\n    <search>⟦␣⟧⟨+0.90⟩x </search>\n"},
		{true, "\n    <search>\x1b[48;5;46;38;5;16m␣\x1b[0m\x1b[2m⟨+0.90⟩\x1b[0mx </search>\n"},
	} {
		var b strings.Builder
		if err := RenderTrajectory(&b, tr, RenderOptions{Color: c.color}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("color %v: output lacks %q:\n%q", c.color, c.want, b.String())
		}
	}
}
