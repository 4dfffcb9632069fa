package study

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/internal/testkit"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// studyRecipe writes a study recipe of three arms (grpo the base, hint,
// same) at seeds 1..3, 4 training steps each, into a temp dir and returns
// its path and output.dir.
func studyRecipe(t *testing.T, metric string) (path, out string) {
	t.Helper()
	dir := t.TempDir()
	out = filepath.Join(dir, "out")
	body := `name: st
policy: {urls: [embedded], model: sim/base}
judge: {url: embedded, model: sim/judge}
retriever: {url: embedded, corpus: '` + dataDir + `/corpus/passages.jsonl', index_dir: '` + testkit.IndexDir + `'}
trainer: {url: embedded, base_model: sim/base, lora_rank: 4}
train: {steps: 4, batch_size: 3, group_size: 3, data: ['` + dataDir + `/qa/hotpotqa.jsonl']}
eval: {every: 2, per_dataset: 2, datasets: {hotpotqa: '` + dataDir + `/qa/hotpotqa.jsonl'}}
output: {dir: '` + out + `'}
study: {seeds: [1, 2, 3], base: grpo, datasets: [hotpotqa], metric: ` + metric + `}
variants:
  grpo: [hindsight.enabled=false]
  hint: [hindsight.enabled=true]
  same: [hindsight.coef=0]
`
	path = filepath.Join(dir, "study.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, out
}

// madeUpReward is the training reward (reward_mean) of steps 1..4 per arm
// and seed: multiples of 1/8 and 1/16, so that the sums below are exact.
var madeUpReward = map[string][3][]float64{
	// Means over the 4 steps: 1.25/4 = 0.3125, 0.75/4 = 0.1875, 1.5/4 = 0.375.
	"grpo": {{0.125, 0.25, 0.375, 0.5}, {0, 0.25, 0.25, 0.25}, {0.25, 0.25, 0.5, 0.5}},
	// 1.75/4 = 0.4375, 1/4 = 0.25, 2.25/4 = 0.5625: the base's plus 0.125,
	// 0.0625 and 0.1875.
	"hint": {{0.25, 0.375, 0.5, 0.625}, {0.125, 0.25, 0.375, 0.25}, {0.375, 0.5, 0.625, 0.75}},
	// The base's own curves.
	"same": {{0.125, 0.25, 0.375, 0.5}, {0, 0.25, 0.25, 0.25}, {0.25, 0.25, 0.5, 0.5}},
}

// madeUpEM is the held-out EM of the two questions at steps 2 and 4 per
// arm and seed (eval.jsonl and the step's questions file).
var madeUpEM = map[string][3][2]float64{
	"grpo": {{0, 0.5}, {0.5, 0.5}, {0, 0}},
	"hint": {{0.5, 1}, {0.5, 1}, {0, 0.5}},
	"same": {{0, 0.5}, {0.5, 0.5}, {0, 0}},
}

// writeMadeUpRuns writes every run of plan as a finished run would have
// left it, from madeUpReward and madeUpEM: steps.jsonl, and eval.jsonl
// with the questions of its evaluations at steps 2 and 4 (question q1
// right when the EM is at least 0.5, q2 when it is 1). A run of
// short[arm] stops after step 3.
func writeMadeUpRuns(t *testing.T, plan *Plan, short map[string]bool) {
	t.Helper()
	for _, arm := range plan.Arms {
		for j, v := range arm.Runs {
			d, err := results.Create(v.Recipe.Output.Dir)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range madeUpReward[arm.Name][j] {
				if short[arm.Name] && i == 3 {
					break
				}
				if err := d.AppendJSONL(results.StepsFile, results.StepRecord{Step: i + 1, RewardMean: r}); err != nil {
					t.Fatal(err)
				}
			}
			for k, step := range []int{2, 4} {
				em := madeUpEM[arm.Name][j][k]
				if err := d.AppendJSONL(results.EvalFile, results.EvalRecord{Step: step, Strategy: results.CurvesStrategy, Dataset: "hotpotqa", N: 2, EM: em}); err != nil {
					t.Fatal(err)
				}
				q1, q2 := 0.0, 0.0
				if em >= 0.5 {
					q1 = 1
				}
				if em == 1 {
					q2 = 1
				}
				if err := d.WriteQuestions(step, results.CurvesStrategy, []results.QuestionRecord{
					{Dataset: "hotpotqa", ID: "q1", EM: q1}, {Dataset: "hotpotqa", ID: "q2", EM: q2}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// near reports whether got is want to 1e-12.
func near(got, want float64) bool { return math.Abs(got-want) < 1e-12 }

// reward_auc compares each run's mean training reward over its steps: per
// arm the mean and sd over seeds, and for the other arms the paired
// difference to the base by seed with its t interval (n-1 df) and its
// bootstrap interval over seeds, all worked out by hand here from the
// made-up curves; the curves are the training reward's.
func TestAnalyseRewardAUC(t *testing.T) {
	path, out := studyRecipe(t, "reward_auc")
	plan, err := NewPlan(path, nil, nil, nil, nil, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if plan.Metric != recipes.StudyMetricRewardAUC || len(plan.Arms) != 3 || plan.Arms[0].Name != "grpo" {
		t.Fatalf("plan: metric %q, arms %+v", plan.Metric, plan.Arms)
	}
	writeMadeUpRuns(t, plan, nil)
	s, curves, err := Analyse(plan)
	if err != nil {
		t.Fatal(err)
	}
	if s.Metric != "reward_auc" || s.Interval != results.IntervalSeeds || s.TInterval != results.IntervalT {
		t.Errorf("metric %q interval %q t interval %q", s.Metric, s.Interval, s.TInterval)
	}
	// The base: AUCs 0.3125, 0.1875, 0.375; mean 0.875/3, deviations
	// 0.0625/3, -0.3125/3, 0.25/3: sd sqrt((0.0625^2+0.3125^2+0.25^2)/9/2).
	base := s.Rows[0]
	wantSD := math.Sqrt((0.0625*0.0625 + 0.3125*0.3125 + 0.25*0.25) / 9 / 2)
	if !base.IsBase || base.Variant != "grpo" || !near(base.Mean, 0.875/3) || !near(base.SD, wantSD) || base.TCI != nil || base.Diff != 0 ||
		base.Step != 4 || len(base.RewardAUC) != 3 || !near(base.RewardAUC[0], 0.3125) || !near(base.RewardAUC[1], 0.1875) || !near(base.RewardAUC[2], 0.375) {
		t.Errorf("base row %+v (t_ci %v), want mean %v sd %v", base, base.TCI, 0.875/3, wantSD)
	}
	// hint - grpo by seed: 0.125, 0.0625, 0.1875: mean 0.125, sd 0.0625,
	// t(0.975, 2) = 4.302653, half-width 4.302653 * 0.0625 / sqrt(3).
	hint := s.Rows[1]
	h := 4.302653 * 0.0625 / math.Sqrt(3)
	if hint.Variant != "hint" || !near(hint.Mean, 1.25/3) || !near(hint.Diff, 0.125) || hint.TCI == nil ||
		math.Abs(hint.TCI[0]-(0.125-h)) > 1e-6 || math.Abs(hint.TCI[1]-(0.125+h)) > 1e-6 {
		t.Errorf("hint row %+v (t_ci %v), want diff 0.125 t interval [%v, %v]", hint, hint.TCI, 0.125-h, 0.125+h)
	}
	// The bootstrap resamples three differences: a resample of the
	// smallest alone (0.0625) has chance 1/27, above 2.5%, and likewise of
	// the largest (0.1875): those are the percentile interval's ends.
	if !near(hint.CI[0], 0.0625) || !near(hint.CI[1], 0.1875) {
		t.Errorf("hint bootstrap interval %v, want [0.0625, 0.1875]", hint.CI)
	}
	// An arm equal to the base: no difference, no width.
	if same := s.Rows[2]; same.Diff != 0 || same.CI != [2]float64{} || same.TCI == nil || *same.TCI != [2]float64{} {
		t.Errorf("same row %+v (t_ci %v), want 0 [0, 0]", same, same.TCI)
	}
	// The curves: the training reward at steps 1..4, mean, min and max over
	// seeds; hint's step 4: 0.625, 0.25, 0.75.
	if len(curves) != 3 || len(curves[1].Steps) != 4 || !near(curves[1].Mean[3], 1.625/3) || curves[1].Min[3] != 0.25 || curves[1].Max[3] != 0.75 {
		t.Errorf("curves %+v", curves)
	}

	// Report prints the table with its interval columns and writes
	// study.json naming the metric and both intervals.
	var b bytes.Buffer
	if _, err := Report(plan, &b, "markdown"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| variant | seeds | steps | reward AUC | sd | diff vs grpo | 95% t CI | 95% bootstrap CI |",
		"| grpo | 3 | 4 | 29.2 | 9.5 | - | - | - |",
		"| hint | 3 | 4 | 41.7 | 15.7 | 12.5 | [-3.0, 28.0] | [6.2, 18.8] |",
		"Training reward AUC (%)", "Student t interval over seeds (n-1 df)", "10000 resamples of the seeds' differences",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	raw, err := os.ReadFile(filepath.Join(out, results.StudyFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"metric": "reward_auc"`, `"interval": "95% paired bootstrap over seeds"`, `"t_interval": "95% Student t over seeds`, `"reward_auc": [`, `"t_ci": [`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("study.json lacks %s:\n%s", want, raw)
		}
	}
	if _, err := os.Stat(filepath.Join(out, results.StudyCurvesFile)); err != nil {
		t.Error(err)
	}

	// The same runs read on the held-out EM: study.json says em and its
	// interval, and keeps the fields it always had.
	em, err := NewPlan(path, nil, nil, nil, nil, "", "em")
	if err != nil {
		t.Fatal(err)
	}
	s, _, err = Analyse(em)
	if err != nil {
		t.Fatal(err)
	}
	// hint - grpo at step 4 by seed: 0.5, 0.5, 0.5.
	if s.Metric != "em" || s.Interval != results.IntervalSeedsQuestions || s.TInterval != "" || s.Rows[1].TCI != nil ||
		s.Rows[1].RewardAUC != nil || !near(s.Rows[1].Diff, 0.5) || s.Rows[1].Step != 4 || s.Rows[1].Questions != 2 || !near(s.Rows[1].Mean, 2.5/3) {
		t.Errorf("em study %+v, rows %+v", s, s.Rows)
	}
	b2, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var old struct {
		Base string `json:"base"`
		Rows []struct {
			EM   []float64  `json:"em"`
			Diff float64    `json:"diff"`
			CI   [2]float64 `json:"ci"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b2, &old); err != nil || old.Base != "grpo" || len(old.Rows) != 3 || len(old.Rows[1].EM) != 3 ||
		strings.Contains(string(b2), `"t_ci"`) || strings.Contains(string(b2), `"reward_auc"`) {
		t.Errorf("em study.json as read before metrics existed: %+v (%v)\n%s", old, err, b2)
	}
}

// A run that has not recorded all its train.steps has no reward AUC to
// compare; reward_auc needs two seeds; an unknown metric is refused.
func TestRewardAUCRefusals(t *testing.T) {
	path, _ := studyRecipe(t, "reward_auc")
	plan, err := NewPlan(path, nil, nil, nil, nil, "", "")
	if err != nil {
		t.Fatal(err)
	}
	writeMadeUpRuns(t, plan, map[string]bool{"hint": true})
	if _, _, err := Analyse(plan); err == nil || !strings.Contains(err.Error(), "hint: ") ||
		!strings.Contains(err.Error(), "3 of its train.steps 4 steps recorded: the run has not finished") {
		t.Errorf("unfinished run: %v", err)
	}
	for _, c := range []struct {
		seeds  []int64
		metric string
		want   string
	}{
		{[]int64{1}, "", "metric reward_auc: its intervals are over seeds, and 1 seed gives none"},
		{nil, "f1", "--metric f1: want one of em, reward_auc"},
	} {
		if _, err := NewPlan(path, nil, nil, nil, c.seeds, "", c.metric); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("seeds %v metric %q: %v, want %q", c.seeds, c.metric, err, c.want)
		}
	}
	// One seed is fine for em.
	if _, err := NewPlan(path, nil, nil, nil, []int64{1}, "", "em"); err != nil {
		t.Errorf("em at one seed: %v", err)
	}
}

// An interrupted study resumed: a run that finished is kept (not run
// again), one with a resume point continues from it, one stopped before
// its first checkpoint starts again; every run then holds each step once.
// The first pass runs every seed to step 2 of 4 (as if the study had been
// stopped there), then one run loses its resume point.
func TestRunResume(t *testing.T) {
	path, out := studyRecipe(t, "reward_auc")
	sets := []string{"checkpoint.every=2", "policy.concurrency=8"}
	short, err := NewPlan(path, append(slices.Clone(sets), "train.steps=2"), nil, []string{"grpo"}, []int64{1, 2}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := Run(ctx, short, Options{AblateOptions{Format: "table"}}); err != nil {
		t.Fatal(err)
	}
	seed := func(s int) string { return filepath.Join(out, "grpo", fmt.Sprintf("seed-%d", s)) }
	if err := os.Remove(filepath.Join(seed(2), "state.json")); err != nil {
		t.Fatal(err)
	}
	full, err := NewPlan(path, sets, nil, []string{"grpo"}, []int64{1, 2}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var o bytes.Buffer
	if _, err := Run(ctx, full, Options{AblateOptions{Out: &o, Format: "table", Resume: true}}); err != nil {
		t.Fatalf("resume: %v\n%s", err, o.String())
	}
	for _, want := range []string{"resuming " + seed(1) + " after step 2",
		"no resume point in " + seed(2) + " (stopped before its first checkpoint): starting it again"} {
		if !strings.Contains(o.String(), want) {
			t.Errorf("resumed study's output lacks %q:\n%s", want, o.String())
		}
	}
	for s := 1; s <= 2; s++ {
		steps, err := (&results.RunDir{Path: seed(s)}).ReadSteps()
		var got []int
		for _, r := range steps {
			got = append(got, r.Step)
		}
		if err != nil || !slices.Equal(got, []int{1, 2, 3, 4}) {
			t.Errorf("seed %d: steps %v (%v), want 1..4 once each", s, got, err)
		}
	}
	// Run again: both finished, kept untouched.
	before, err := os.ReadFile(filepath.Join(seed(1), results.StepsFile))
	if err != nil {
		t.Fatal(err)
	}
	o.Reset()
	if _, err := Run(ctx, full, Options{AblateOptions{Out: &o, Format: "table", Resume: true}}); err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 2; s++ {
		if want := "finished earlier: " + seed(s) + " holds step 4 of 4, kept"; !strings.Contains(o.String(), want) {
			t.Errorf("second resume's output lacks %q:\n%s", want, o.String())
		}
	}
	if after, err := os.ReadFile(filepath.Join(seed(1), results.StepsFile)); err != nil || !bytes.Equal(before, after) {
		t.Errorf("a finished run's steps.jsonl changed on resume (%v)", err)
	}
}
