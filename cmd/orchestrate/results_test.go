package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/results"
)

// writeResultsRun writes a run directory name under parent with greedy
// evaluations at steps 0 and 10 on nq and popqa, per-question records at
// step 10 and a recipe.yaml.
func writeResultsRun(t *testing.T, parent, name string) string {
	t.Helper()
	d, err := results.Create(filepath.Join(parent, name))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []results.EvalRecord{
		{Step: 0, Strategy: "greedy", Dataset: "nq", N: 20, EM: .10, F1: .2},
		{Step: 0, Strategy: "greedy", Dataset: "popqa", N: 20, EM: .20, F1: .3},
		{Step: 10, Strategy: "greedy", Dataset: "nq", N: 20, EM: .40, F1: .5},
		{Step: 10, Strategy: "greedy", Dataset: "popqa", N: 20, EM: .30, F1: .4},
	} {
		if err := d.AppendJSONL(results.EvalFile, r); err != nil {
			t.Fatal(err)
		}
	}
	var qs []results.QuestionRecord
	for _, ds := range []struct {
		name  string
		right int
	}{{"nq", 8}, {"popqa", 6}} {
		for i := range 20 {
			q := results.QuestionRecord{Dataset: ds.name, ID: fmt.Sprint(i)}
			if i < ds.right {
				q.EM, q.F1 = 1, 1
			}
			qs = append(qs, q)
		}
	}
	if err := d.WriteQuestions(10, "greedy", qs); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFileAtomic(results.RecipeFile, []byte("name: "+name+"\nhindsight:\n  enabled: true\n  gold_answer: true\n")); err != nil {
		t.Fatal(err)
	}
	return d.Path
}

func TestResultsFormats(t *testing.T) {
	dir := writeResultsRun(t, t.TempDir(), "myrun")

	out, stderr, err := runCLI(t, nil, "results", dir)
	if err != nil {
		t.Fatalf("results: %v (stderr %q)", err, stderr)
	}
	for _, want := range []string{"| step | strategy |", "| myrun ", "|   10 | greedy ", "| 40.0 |", "| 35.0 |", "myrun: hindsight=on gold=on\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "|    0 |") {
		t.Errorf("table shows step 0 without --by-step:\n%s", out)
	}

	out, _, err = runCLI(t, nil, "results", dir, "--format", "markdown", "--reference", "search-r1", "--by-step")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "| run | step | strategy | NQ | TriviaQA | PopQA |") ||
		!strings.HasPrefix(lines[2], "| Search-R1 GRPO (published") {
		t.Errorf("markdown header or first row:\n%s", out)
	}
	for _, want := range []string{"| myrun | 0 | greedy | 10.0 | - | 20.0 |", "| myrun | 10 | greedy | 40.0 [", "\nn (questions per dataset, same in every run row): NQ 20, PopQA 20.\n", "Published: "} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}

	out, _, err = runCLI(t, nil, "results", dir, "--format", "csv", "--ci-iters", "200")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("csv: %v\n%s", err, out)
	}
	if want := "run,step,strategy,nq_em,nq_lo,nq_hi,popqa_em,popqa_lo,popqa_hi,avg_em,avg_lo,avg_hi"; len(recs) != 2 || strings.Join(recs[0], ",") != want {
		t.Fatalf("csv:\n%s\nwant header %s and one row", out, want)
	}
	row := recs[1]
	if row[0] != "myrun" || row[1] != "10" || row[3] != "0.4000" || row[9] != "0.3500" || row[4] == "" || row[11] == "" {
		t.Errorf("csv row %q", row)
	}

	out, _, err = runCLI(t, nil, "results", dir, "--format", "csv", "--ci-iters", "0")
	if err != nil || strings.Contains(out, "0.4000,0.") {
		t.Errorf("--ci-iters 0 still prints intervals (%v):\n%s", err, out)
	}
}

func TestResultsPlot(t *testing.T) {
	parent := t.TempDir()
	a := writeResultsRun(t, parent, "a")
	b := writeResultsRun(t, filepath.Join(parent, "other"), "a") // same base name
	plot := filepath.Join(parent, "em.png")
	out, stderr, err := runCLI(t, nil, "results", a, b, "--plot", plot)
	if err != nil {
		t.Fatalf("results --plot: %v", err)
	}
	if !strings.Contains(stderr, "wrote "+plot) {
		t.Errorf("stderr %q does not name the plot", stderr)
	}
	if !strings.Contains(out, filepath.Clean(a)) || !strings.Contains(out, filepath.Clean(b)) {
		t.Errorf("two runs named a are not told apart:\n%s", out)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if s := img.Bounds().Size(); s.X < 640 || s.Y < 400 {
		t.Errorf("plot %v", s)
	}
}

func TestResultsErrors(t *testing.T) {
	parent := t.TempDir()
	missing := filepath.Join(parent, "runs", "x")
	empty := filepath.Join(parent, "empty")
	os.Mkdir(empty, 0o755)
	good := writeResultsRun(t, parent, "good")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{missing}, missing + ": no such run directory"},
		{[]string{good, empty}, empty + ": no eval.jsonl"},
		{[]string{good, "--format", "html"}, `unknown --format "html"`},
		{[]string{good, "--reference", "nope"}, `unknown reference "nope" (known: search-r1)`},
		{[]string{good, "--ci-iters", "-1"}, "--ci-iters -1 is negative"},
		{nil, "give at least one run directory"},
		{[]string{"--reference", "search-r1", "--plot", filepath.Join(parent, "p.png")}, "--plot needs at least one run directory"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"results"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.args, err, c.want)
		}
	}
	// Reference rows alone need no run directory.
	out, _, err := runCLI(t, nil, "results", "--reference", "search-r1")
	if err != nil || !strings.Contains(out, "HindSearch, no-gold judge (published)") {
		t.Errorf("--reference alone: %v\n%s", err, out)
	}
}

func TestResultsPhases(t *testing.T) {
	dir := t.TempDir()
	rd := &results.RunDir{Path: dir}
	for step := 1; step <= 2; step++ {
		if err := rd.AppendJSONL("steps.jsonl", results.StepRecord{Step: step, RewardMean: 0.25, Failed: 3, Critiques: 3,
			PhaseSeconds: map[string]float64{"rollout": 1.5, "judge": 0.25, "teacher": 0.5, "train": 0.75, "sync": 0.125, "eval": 0}}); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut, nil)
	root.SetArgs([]string{"results", dir, "--phases"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| step |", "rollout", "teacher", "1.50", "0.12", "phases overlap"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	root = newRootCmd(&out, &errOut, nil)
	root.SetArgs([]string{"results", t.TempDir(), "--phases"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "no steps.jsonl records") {
		t.Errorf("empty dir: %v", err)
	}
}
