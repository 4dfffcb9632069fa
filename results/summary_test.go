package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// questions returns n question records of dataset with k of them right.
func questions(dataset string, n, k int) []QuestionRecord {
	out := make([]QuestionRecord, n)
	for i := range out {
		out[i] = QuestionRecord{Dataset: dataset, ID: fmt.Sprintf("%s-%d", dataset, i), F1: 0.5, Answer: "a"}
		if i < k {
			out[i].EM, out[i].F1 = 1, 1
		}
	}
	return out
}

// writeRun writes a run directory named sim-nogold under parent: greedy
// evaluated at steps 0, 8 and 16 on nq and hotpotqa (per-question records at
// step 16, and for nq only at step 8), a "sampled" strategy at step 8 and a
// recipe.yaml with hindsight switches.
func writeRun(t *testing.T, parent string) string {
	t.Helper()
	d, err := Create(filepath.Join(parent, "sim-nogold"))
	if err != nil {
		t.Fatal(err)
	}
	recs := []EvalRecord{
		{Step: 0, Strategy: "greedy", Dataset: "nq", N: 50, EM: .10, F1: .2},
		{Step: 0, Strategy: "greedy", Dataset: "hotpotqa", N: 40, EM: .05, F1: .1},
		{Step: 8, Strategy: "greedy", Dataset: "nq", N: 50, EM: .30, F1: .4},
		{Step: 8, Strategy: "greedy", Dataset: "hotpotqa", N: 40, EM: .15, F1: .2},
		{Step: 8, Strategy: "sampled", Dataset: "nq", N: 50, EM: .26, F1: .3},
		{Step: 16, Strategy: "greedy", Dataset: "nq", N: 50, EM: .40, F1: .5},
		{Step: 16, Strategy: "greedy", Dataset: "hotpotqa", N: 40, EM: .25, F1: .3},
	}
	for _, r := range recs {
		if err := d.AppendJSONL(EvalFile, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.WriteQuestions(16, "greedy", append(questions("nq", 50, 20), questions("hotpotqa", 40, 10)...)); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteQuestions(8, "greedy", questions("nq", 50, 15)); err != nil {
		t.Fatal(err)
	}
	recipe := "name: sim\nseed: 1\njudge:\n  model: sim/judge-7b\nhindsight:\n  enabled: true\n  gold_answer: false\n  loss: clamp\n  broadcast: search\n  teacher: self\n  coef: 1.0\n  clamp: 0.5\n"
	if err := d.WriteFileAtomic(RecipeFile, []byte(recipe)); err != nil {
		t.Fatal(err)
	}
	return d.Path
}

func TestQuestionsRoundTrip(t *testing.T) {
	d, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := d.ReadQuestions(3, "greedy"); got != nil || err != nil {
		t.Fatalf("missing file: %v, %v; want nil, nil", got, err)
	}
	recs := []QuestionRecord{
		{Dataset: "nq", ID: "q1", EM: 1, F1: 1, Answer: "Paris <b>&"},
		{Step: 3, Strategy: "greedy", Dataset: "nq", ID: "q2", F1: 0.25, Answer: ""},
	}
	if err := d.WriteQuestions(3, "greedy", recs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(d.Path, "questions", "greedy-step-0003.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"step":3,"strategy":"greedy","dataset":"nq","id":"q1","em":1,"f1":1,"answer":"Paris <b>&"}` + "\n"; !strings.HasPrefix(string(b), want) {
		t.Errorf("file starts %q, want %q", b, want)
	}
	got, err := d.ReadQuestions(3, "greedy")
	if err != nil {
		t.Fatal(err)
	}
	recs[0].Step, recs[0].Strategy = 3, "greedy"
	if !reflect.DeepEqual(got, recs) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, recs)
	}
	// Rewriting replaces, never appends.
	if err := d.WriteQuestions(3, "greedy", recs[:1]); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.ReadQuestions(3, "greedy"); len(got) != 1 {
		t.Errorf("after rewrite: %d records, want 1", len(got))
	}
	if err := d.WriteQuestions(4, "greedy", recs); err == nil {
		t.Error("records of step 3 written as step 4")
	}
	for _, s := range []string{"", "a/b", "..", `a\b`} {
		if err := d.WriteQuestions(1, s, nil); err == nil {
			t.Errorf("strategy %q accepted", s)
		}
	}
	if got := QuestionsFile(12345, "greedy"); got != filepath.Join("questions", "greedy-step-12345.jsonl") {
		t.Errorf("QuestionsFile = %q", got)
	}
}

func TestQuestionRecordKeys(t *testing.T) {
	b, _ := json.Marshal(QuestionRecord{Step: 1, Strategy: "s", Dataset: "d", ID: "i", EM: 1, F1: .5, Answer: "x"})
	if want := `{"step":1,"strategy":"s","dataset":"d","id":"i","em":1,"f1":0.5,"answer":"x"}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestSummariseRunLast(t *testing.T) {
	dir := writeRun(t, t.TempDir())
	got, err := SummariseRun(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d summaries, want greedy@16 and sampled@8: %+v", len(got), got)
	}
	g, s := got[0], got[1]
	if g.Name != "sim-nogold" || g.Dir != dir || g.Step != 16 || g.Strategy != "greedy" {
		t.Errorf("first summary %q %q %d %q", g.Name, g.Dir, g.Step, g.Strategy)
	}
	if s.Step != 8 || s.Strategy != "sampled" || s.HasCI || len(s.CI) != 0 {
		t.Errorf("second summary step %d %q HasCI %v CI %v", s.Step, s.Strategy, s.HasCI, s.CI)
	}
	if !reflect.DeepEqual(g.N, map[string]int{"nq": 50, "hotpotqa": 40}) {
		t.Errorf("N = %v", g.N)
	}
	if g.EM["nq"] != .40 || g.F1["hotpotqa"] != .3 || math.Abs(g.AvgEM-.325) > 1e-12 {
		t.Errorf("EM %v F1 %v avg %v", g.EM, g.F1, g.AvgEM)
	}
	if !g.HasCI || len(g.CI) != 2 {
		t.Fatalf("greedy@16 HasCI %v CI %v; want intervals for both datasets", g.HasCI, g.CI)
	}
	for ds, m := range map[string]float64{"nq": .4, "hotpotqa": .25} {
		ci := g.CI[ds]
		if !(ci[0] < m && m < ci[1]) {
			t.Errorf("%s CI %v does not contain %v", ds, ci, m)
		}
		if want0, want1 := BootstrapCI(questionEM(t, dir, 16, ds), DefaultBootstrapIters, DefaultBootstrapSeed); ci != [2]float64{want0, want1} {
			t.Errorf("%s CI %v, want BootstrapCI's [%v, %v]", ds, ci, want0, want1)
		}
	}
	if !(g.AvgCI[0] < g.AvgEM && g.AvgEM < g.AvgCI[1]) {
		t.Errorf("AvgCI %v does not contain %v", g.AvgCI, g.AvgEM)
	}
	want := "sim-nogold: recipe=sim hindsight=on gold=off loss=clamp broadcast=search teacher=self coef=1 clamp=0.5"
	if g.Caption != want {
		t.Errorf("caption %q\n      want %q", g.Caption, want)
	}
}

// questionEM returns the EM of the greedy per-question records of ds at step.
func questionEM(t *testing.T, dir string, step int, ds string) []float64 {
	t.Helper()
	qs, err := (&RunDir{Path: dir}).ReadQuestions(step, "greedy")
	if err != nil {
		t.Fatal(err)
	}
	var v []float64
	for _, q := range qs {
		if q.Dataset == ds {
			v = append(v, q.EM)
		}
	}
	return v
}

func TestSummariseRunByStep(t *testing.T) {
	dir := writeRun(t, t.TempDir())
	got, err := SummariseRun(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range got {
		keys = append(keys, fmt.Sprintf("%d/%s ci=%v/%d", s.Step, s.Strategy, s.HasCI, len(s.CI)))
	}
	// Step 8 greedy has per-question records for nq only: a CI for nq, none
	// for the average.
	want := []string{"0/greedy ci=false/0", "8/greedy ci=false/1", "8/sampled ci=false/0", "16/greedy ci=true/2"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("got %q\nwant %q", keys, want)
	}
	noCI, err := SummariseRunWith(dir, SummaryOptions{ByStep: true, NoCI: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range noCI {
		if s.HasCI || len(s.CI) > 0 {
			t.Errorf("NoCI: step %d has intervals", s.Step)
		}
	}
}

func TestSummariseRunErrors(t *testing.T) {
	parent := t.TempDir()
	empty := filepath.Join(parent, "empty")
	os.Mkdir(empty, 0o755)
	blank := filepath.Join(parent, "blank")
	os.Mkdir(blank, 0o755)
	os.WriteFile(filepath.Join(blank, EvalFile), []byte("\n"), 0o644)
	badRecipe := writeRun(t, filepath.Join(parent, "bad"))
	os.WriteFile(filepath.Join(badRecipe, RecipeFile), []byte("hindsight: [\n"), 0o644)
	for dir, want := range map[string]string{
		filepath.Join(parent, "missing"): filepath.Join(parent, "missing") + ": no such run directory",
		empty:                            empty + ": no eval.jsonl",
		blank:                            blank + ": eval.jsonl has no records",
		filepath.Join(blank, EvalFile):   filepath.Join(blank, EvalFile) + ": not a directory",
		badRecipe:                        filepath.Join(badRecipe, RecipeFile) + ": ",
	} {
		_, err := SummariseRun(dir, false)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", dir, err, want)
		}
	}
}

func TestRecipeCaption(t *testing.T) {
	parent := t.TempDir()
	for body, want := range map[string]string{
		"": "",
		"name: run\nhindsight:\n  enabled: false\n  gold_answer: true\n": "run: hindsight=off",
		"name: run\n":                       "run: no hindsight keys",
		"hindsight:\n  gold_answer: true\n": "run: gold=on",
	} {
		dir := filepath.Join(parent, "run")
		os.RemoveAll(dir)
		os.Mkdir(dir, 0o755)
		if body != "" {
			os.WriteFile(filepath.Join(dir, RecipeFile), []byte(body), 0o644)
		}
		got, err := recipeCaption(dir)
		if err != nil || got != want {
			t.Errorf("%q: caption %q, %v; want %q", body, got, err, want)
		}
	}
}

func TestReference(t *testing.T) {
	rows, err := Reference("search-r1")
	if err != nil {
		t.Fatal(err)
	}
	avg := map[string]float64{}
	for _, r := range rows {
		avg[r.Name] = r.AvgEM
		if r.Step >= 0 || r.HasCI {
			t.Errorf("%s: step %d HasCI %v", r.Name, r.Step, r.HasCI)
		}
	}
	want := map[string]float64{
		"Search-R1 GRPO (published, Qwen2.5-3B-Instruct)": .336,
		"RAG (published)":                       .270,
		"Direct (published)":                    .134,
		"HindSearch (published)":                .394,
		"HindSearch, no-gold judge (published)": .347,
	}
	if !reflect.DeepEqual(avg, want) || rows[0].Name != "Search-R1 GRPO (published, Qwen2.5-3B-Instruct)" {
		t.Errorf("averages %v\nwant %v", avg, want)
	}
	em := rows[0].EM
	wantEM := map[string]float64{"nq": .397, "triviaqa": .565, "popqa": .391, "hotpotqa": .331, "2wikimultihopqa": .310, "musique": .124, "bamboogle": .232}
	if !reflect.DeepEqual(em, wantEM) {
		t.Errorf("Search-R1 EM %v", em)
	}
	var sum float64
	for _, v := range em {
		sum += v
	}
	if math.Abs(sum/7-.336) > .0005 {
		t.Errorf("published average .336 is not the mean %v of the datasets", sum/7)
	}
	for _, r := range rows[1:] {
		if len(r.EM) != 0 {
			t.Errorf("%s has dataset cells %v", r.Name, r.EM)
		}
	}
	if _, err := Reference("nope"); err == nil || !strings.Contains(err.Error(), "search-r1") {
		t.Errorf("unknown reference: %v; want an error listing search-r1", err)
	}
}

// compareRows is the golden fixture: the reference rows, then the
// fixture run's last-step summaries, and a row with an extra dataset.
func compareRows(t *testing.T) []RunSummary {
	t.Helper()
	rows, err := Reference("search-r1")
	if err != nil {
		t.Fatal(err)
	}
	run, err := SummariseRun(writeRun(t, t.TempDir()), false)
	if err != nil {
		t.Fatal(err)
	}
	rows = append(rows, run...)
	return append(rows, RunSummary{
		Name: "odd|name", Step: 3, Strategy: "greedy",
		N: map[string]int{"zz_custom": 7}, EM: map[string]float64{"zz_custom": 1.0 / 3},
		CI: map[string][2]float64{"zz_custom": {0, 2.0 / 3}}, AvgEM: 1.0 / 3,
		AvgCI: [2]float64{0, 2.0 / 3}, HasCI: true,
	})
}

func TestCompareTableGolden(t *testing.T) {
	rows := compareRows(t)
	caption := rows[0].Caption + "\n" + rows[len(rows)-2].Caption
	for format, file := range map[string]string{"table": "compare_table.golden", "markdown": "compare_markdown.golden", "csv": "compare_csv.golden"} {
		var buf bytes.Buffer
		if err := CompareTable(&buf, rows, format, caption); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		golden(t, file, buf.Bytes())
	}
	if err := CompareTable(&bytes.Buffer{}, rows, "html", ""); err == nil || !strings.Contains(err.Error(), "markdown") {
		t.Errorf("unknown format: %v; want an error listing the formats", err)
	}
}

func TestCompareTableEmpty(t *testing.T) {
	for _, f := range Formats() {
		var buf bytes.Buffer
		if err := CompareTable(&buf, nil, f, ""); err != nil || !strings.Contains(buf.String(), "avg") {
			t.Errorf("%s: %v\n%s", f, err, buf.String())
		}
	}
}

func TestPlotAverageEM(t *testing.T) {
	parent := t.TempDir()
	byStep, err := SummariseRun(writeRun(t, parent), true)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := Reference("search-r1")
	single := []RunSummary{{Step: 0, Strategy: "greedy", AvgEM: .1}, {Step: 16, Strategy: "greedy", AvgEM: .3}}
	path := filepath.Join(parent, "plots", "em.png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PlotAverageEM(path, map[string][]RunSummary{"sim-nogold": append(byStep, ref...), "baseline": single}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 640 || b.Dy() < 400 {
		t.Errorf("plot is %dx%d, want at least 640x400", b.Dx(), b.Dy())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("plot dir holds %d entries, want just the plot (temp file left?)", len(entries))
	}
	if err := PlotAverageEM(filepath.Join(parent, "none.png"), map[string][]RunSummary{"r": ref}); err == nil {
		t.Error("a plot with no steps was written")
	}
}

func TestNiceTicks(t *testing.T) {
	labels := func(tk niceTicks, lo, hi float64) string {
		var l []string
		for _, x := range tk.Ticks(lo, hi) {
			if x.Label != "" {
				l = append(l, x.Label)
			}
		}
		return strings.Join(l, " ")
	}
	for _, c := range []struct {
		tk     niceTicks
		lo, hi float64
		want   string
	}{
		{niceTicks{integer: true}, -3, 103, "0 20 40 60 80 100"},
		{niceTicks{integer: true}, -0.1, 3.1, "0 1 2 3"},
		{niceTicks{}, 0, 45, "0 10 20 30 40"},
		{niceTicks{}, 0, 0.3, "0.00 0.05 0.10 0.15 0.20 0.25 0.30"},
	} {
		if got := labels(c.tk, c.lo, c.hi); got != c.want {
			t.Errorf("%+v [%v, %v]: %q, want %q", c.tk, c.lo, c.hi, got, c.want)
		}
	}
}
