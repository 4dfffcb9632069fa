package results

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func evalFixture() []EvalRecord {
	// Published Search-R1 numbers at step 0, a custom dataset, a later step
	// missing some datasets, and a second strategy.
	em := map[string]float64{
		"nq": .397, "triviaqa": .565, "popqa": .391, "hotpotqa": .331,
		"2wikimultihopqa": .310, "musique": .124, "bamboogle": .232,
	}
	var recs []EvalRecord
	for _, ds := range []string{"bamboogle", "nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique"} {
		recs = append(recs, EvalRecord{Step: 100, Strategy: "greedy", Dataset: ds, N: 500, EM: em[ds], F1: em[ds] + .1})
	}
	recs = append(recs,
		EvalRecord{Step: 100, Strategy: "greedy", Dataset: "zz_custom", N: 10, EM: .5, F1: .6},
		EvalRecord{Step: 0, Strategy: "greedy", Dataset: "nq", N: 500, EM: .1, F1: .2},
		EvalRecord{Step: 0, Strategy: "greedy", Dataset: "aa_custom", N: 10, EM: .3, F1: .4},
		EvalRecord{Step: 0, Strategy: "sampled-long-name", Dataset: "nq", N: 500, EM: .125, F1: .2},
	)
	return recs
}

func TestEvalTableGolden(t *testing.T) {
	var buf bytes.Buffer
	caption := "Table 1: EM (%) of Qwen2.5-3B-Instruct; 2wiki = 2WikiMultihopQA."
	if err := EvalTable(&buf, evalFixture(), caption); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), caption+"\n") {
		t.Errorf("caption not printed verbatim:\n%s", buf.String())
	}
	golden(t, "eval_table.golden", buf.Bytes())
}

func TestEvalTableEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := EvalTable(&buf, nil, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "avg") {
		t.Errorf("empty table lacks its header:\n%s", buf.String())
	}
}

func TestStepsTableGolden(t *testing.T) {
	recs := []StepRecord{
		{Step: 1, RewardMean: 0.2, Trajectories: 2560, Failed: 3, Critiques: 512, OPDTokens: 123456,
			PhaseSeconds: map[string]float64{"rollout": 61.234, "judge": 12.5, "teacher": 8.001, "train": 30, "sync": 2.345, "eval": 0}},
		{Step: 2, RewardMean: 0.3456, Trajectories: 2560, Critiques: 500, OPDTokens: 7,
			PhaseSeconds: map[string]float64{"rollout": 59.999, "train": 29.5}},
	}
	var buf bytes.Buffer
	if err := StepsTable(&buf, recs); err != nil {
		t.Fatal(err)
	}
	golden(t, "steps_table.golden", buf.Bytes())
}

func TestSummarise(t *testing.T) {
	recs := []EvalRecord{
		{Step: 5, Strategy: "b", Dataset: "nq", EM: .5},
		{Step: 1, Strategy: "x", Dataset: "nq", EM: .1},
		{Step: 5, Strategy: "a", Dataset: "nq", EM: .2, F1: .4},
		{Step: 5, Strategy: "a", Dataset: "popqa", EM: .4, F1: .6},
		{Step: 5, Strategy: "b", Dataset: "nq", EM: .7}, // replaces the first
	}
	rows := Summarise(recs)
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%d/%s %.2f %.2f", r.Step, r.Strategy, r.AvgEM, r.AvgF1))
	}
	want := []string{"1/x 0.10 0.00", "5/b 0.70 0.00", "5/a 0.30 0.50"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	d, err := Create(filepath.Join(t.TempDir(), "runs", "r1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"one", "two, longer"} {
		if err := d.WriteFileAtomic("state.json", []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(d.Path, "state.json"))
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	if err := d.WriteFileAtomic("sub/x.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFileAtomic("../escape", []byte("x")); err == nil {
		t.Error("a name outside the run dir was accepted")
	}
	var names []string
	filepath.WalkDir(d.Path, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			names = append(names, e.Name())
		}
		return err
	})
	if want := []string{"state.json", "x.txt"}; !reflect.DeepEqual(names, want) {
		t.Errorf("files %q, want %q (temp files left behind?)", names, want)
	}
	st, err := os.Stat(filepath.Join(d.Path, "state.json"))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v; want 0644", st.Mode(), err)
	}
}

func TestAppendReadRoundTrip(t *testing.T) {
	d, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := d.ReadEval(); err != nil || recs != nil {
		t.Fatalf("missing file: %v, %v; want no records", recs, err)
	}
	want := evalFixture()
	for _, r := range want {
		if err := d.AppendJSONL(EvalFile, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := d.ReadEval()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}

	steps := []StepRecord{
		{Step: 1, PhaseSeconds: map[string]float64{"rollout": 1.5}, TrainerMetrics: map[string]float64{"loss": 0.25}, Simulated: true},
		{Step: 2, PhaseSeconds: map[string]float64{}},
	}
	for _, s := range steps {
		if err := d.AppendJSONL(StepsFile, s); err != nil {
			t.Fatal(err)
		}
	}
	gotSteps, err := d.ReadSteps()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotSteps, steps) {
		t.Errorf("steps round trip:\n got %+v\nwant %+v", gotSteps, steps)
	}
}

func TestStepRecordKeys(t *testing.T) {
	b, err := json.Marshal(StepRecord{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"step":0,"reward_mean":0,"em_mean":0,"f1_mean":0,"trajectories":0,"failed":0,"critiques":0,"critique_failures":0,"opd_tokens":0,"opd_mean":0,"mean_turns":0,"mean_searches":0,"phase_seconds":null,"batch_digest":"","adapter":"","sampled_with":"","policy_lag":0,"wall_seconds":0,"simulated":false}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(EvalRecord{Step: 1, Strategy: "s", Dataset: "d", N: 2, EM: .5, F1: .25})
	if want := `{"step":1,"strategy":"s","dataset":"d","n":2,"em":0.5,"f1":0.25}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestAppendConcurrent(t *testing.T) {
	d, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := EvalRecord{Step: i, Strategy: strings.Repeat("s", 1000), Dataset: "nq"}
			if err := d.AppendJSONL(EvalFile, r); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	recs, err := d.ReadEval()
	if err != nil || len(recs) != n {
		t.Fatalf("read %d records, %v; want %d", len(recs), err, n)
	}
}

func TestReadBadLine(t *testing.T) {
	d, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.Path, StepsFile)
	data := "{\"step\":1}\n\n{\"step\":2}\n{\"step\": oops}\n{\"step\":4}\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = d.ReadSteps()
	if err == nil || !strings.Contains(err.Error(), path+":4:") {
		t.Errorf("error %v; want one naming %s:4", err, path)
	}
}

func TestTornLastLine(t *testing.T) {
	d, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.Path, EvalFile)
	// A crash in the middle of an append left a partial last line.
	if err := os.WriteFile(path, []byte("{\"step\":1}\n{\"step\":2,\"stra"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := d.ReadEval()
	if err != nil || len(recs) != 1 {
		t.Fatalf("got %v, %v; want the one whole record", recs, err)
	}
	if err := d.AppendJSONL(EvalFile, EvalRecord{Step: 3}); err != nil {
		t.Fatal(err)
	}
	// The torn line is now a whole bad line: reported, not merged into the
	// new record.
	if _, err := d.ReadEval(); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("error %v; want one naming line 2", err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(b), "\n{\"step\":3,\"strategy\":\"\",\"dataset\":\"\",\"n\":0,\"em\":0,\"f1\":0}\n") {
		t.Errorf("appended line not on its own line: %q", b)
	}
}

// SavedStep reads state.json's step, 0 without one or when it does not
// read (a run killed while writing it leaves the previous one: atomic).
func TestSavedStep(t *testing.T) {
	d := &RunDir{Path: t.TempDir()}
	if got := d.SavedStep(); got != 0 {
		t.Errorf("no state.json: %d", got)
	}
	if err := d.WriteFileAtomic("state.json", []byte(`{"step": 7, "model_id": "m"}`)); err != nil {
		t.Fatal(err)
	}
	if got := d.SavedStep(); got != 7 {
		t.Errorf("step %d, want 7", got)
	}
	if err := d.WriteFileAtomic("state.json", []byte(`{"step": `)); err != nil {
		t.Fatal(err)
	}
	if got := d.SavedStep(); got != 0 {
		t.Errorf("unreadable state.json: %d", got)
	}
}
