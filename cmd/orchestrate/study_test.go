package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/results"
)

// study runs two variants at two seeds on a tiny recipe and leaves the
// table on stdout, study.json and study-curves.png in output.dir.
func TestStudyTinyRecipe(t *testing.T) {
	dir := t.TempDir()
	data := abs(t, "../../recipes/data")
	body := `name: tiny-study
policy: {urls: [embedded], model: sim/base, concurrency: 8}
judge: {url: embedded, model: sim/judge}
retriever: {url: embedded, corpus: '` + data + `/corpus/passages.jsonl', index_dir: '` + filepath.Join(dir, "index") + `'}
trainer: {url: embedded, base_model: sim/base, lora_rank: 4, learning_rate: 0.3}
train: {steps: 2, batch_size: 3, group_size: 3, data: ['` + data + `/qa/hotpotqa.jsonl']}
rollout: {max_turns: 2}
eval: {every: 1, per_dataset: 4, datasets: {hotpotqa: '` + data + `/qa/hotpotqa.jsonl', musique: '` + data + `/qa/musique.jsonl'}}
output: {dir: out}
study: {seeds: [1, 2], base: grpo, datasets: [hotpotqa, musique]}
variants:
  grpo: [hindsight.enabled=false]
  no-gold: [hindsight.gold_answer=false]
`
	path := filepath.Join(dir, "study.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCLI(t, nil, "study", path, "--format", "markdown")
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr)
	}
	for _, want := range []string{"| grpo | 2 | 2 |", "| no-gold | 2 | 2 |", "diff vs grpo", "10000 resamples", "no-gold: [hindsight.gold_answer=false]"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "| base |") {
		t.Errorf("the unmodified recipe ran though the study base is grpo:\n%s", stdout)
	}
	out := filepath.Join(dir, "out")
	b, err := os.ReadFile(filepath.Join(out, results.StudyFile))
	if err != nil {
		t.Fatal(err)
	}
	var s results.Study
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Base != "grpo" || len(s.Rows) != 2 || s.Rows[0].Variant != "grpo" || !s.Rows[0].IsBase || len(s.Rows[1].EM) != 2 || s.Rows[1].Questions != 8 {
		t.Errorf("study.json %+v", s)
	}
	for _, p := range []string{results.StudyCurvesFile, "grpo/seed-1/eval.jsonl", "no-gold/seed-2/eval.jsonl"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Error(err)
		}
	}
	if s.Metric != "em" || s.Interval != results.IntervalSeedsQuestions {
		t.Errorf("study.json metric %q interval %q", s.Metric, s.Interval)
	}
	// Read again on the training reward, then on the held-out EM: the
	// second reading writes the study.json the run wrote, byte for byte.
	auc, _, err := runCLI(t, nil, "study", path, "--analyse", "--metric", "reward_auc", "--format", "markdown")
	if err != nil || !strings.Contains(auc, "| no-gold | 2 | 2 |") || !strings.Contains(auc, "95% t CI") || strings.Contains(auc, "== run") {
		t.Errorf("--analyse --metric reward_auc: %v\n%s", err, auc)
	}
	again, _, err := runCLI(t, nil, "study", path, "--analyse", "--format", "markdown")
	if err != nil || !strings.HasSuffix(stdout, again) {
		t.Errorf("--analyse: %v\n%s\nthe run printed:\n%s", err, again, stdout)
	}
	if b2, err := os.ReadFile(filepath.Join(out, results.StudyFile)); err != nil || string(b2) != string(b) {
		t.Errorf("study.json from --analyse differs from the run's (%v):\n%s\nwas:\n%s", err, b2, b)
	}
	if _, _, err := runCLI(t, nil, "study", path, "--base", "nope"); err == nil || !strings.Contains(err.Error(), "--base nope") {
		t.Errorf("--base nope: %v", err)
	}
	if _, _, err := runCLI(t, nil, "study", path, "--set", "study.datasets=nq"); err == nil || !strings.Contains(err.Error(), "study.datasets") {
		t.Errorf("study.datasets=nq: %v", err)
	}
}

// study --analyse runs nothing: it reads the runs a study left (here
// made up: steps.jsonl only) and prints and writes the table on the
// metric asked for, whose numbers are worked out by hand below.
func TestStudyAnalyseRewardAUC(t *testing.T) {
	dir := t.TempDir()
	data := abs(t, "../../recipes/data")
	out := filepath.Join(dir, "out")
	body := `name: made-up
policy: {urls: [embedded], model: sim/base}
judge: {url: embedded, model: sim/judge}
retriever: {url: embedded, corpus: '` + data + `/corpus/passages.jsonl', index_dir: '` + filepath.Join(dir, "index") + `'}
trainer: {url: embedded, base_model: sim/base, lora_rank: 4}
train: {steps: 3, batch_size: 3, group_size: 3, data: ['` + data + `/qa/hotpotqa.jsonl']}
eval: {every: 3, per_dataset: 4, datasets: {hotpotqa: '` + data + `/qa/hotpotqa.jsonl'}}
output: {dir: '` + out + `'}
study: {seeds: [1, 2], base: grpo, datasets: [hotpotqa]}
variants:
  grpo: [hindsight.enabled=false]
  no-gold: [hindsight.gold_answer=false]
`
	path := filepath.Join(dir, "study.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// Mean rewards over the 3 steps: grpo 0.5 and 0.25, no-gold 0.75 and
	// 0.25.
	rewards := map[string][][]float64{
		"grpo":    {{0.25, 0.5, 0.75}, {0, 0.25, 0.5}},
		"no-gold": {{0.5, 0.75, 1}, {0.25, 0.25, 0.25}},
	}
	for arm, seeds := range rewards {
		for i, rs := range seeds {
			d, err := results.Create(filepath.Join(out, arm, fmt.Sprintf("seed-%d", i+1)))
			if err != nil {
				t.Fatal(err)
			}
			for j, r := range rs {
				if err := d.AppendJSONL(results.StepsFile, results.StepRecord{Step: j + 1, RewardMean: r}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	stdout, stderr, err := runCLI(t, nil, "study", path, "--analyse", "--metric", "reward_auc", "--format", "csv")
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr)
	}
	// grpo: mean 0.375, sd sqrt(2 * 0.125^2) = 0.1768. no-gold: mean 0.5,
	// sd sqrt(2 * 0.25^2) = 0.3536; differences by seed 0.25 and 0: mean
	// 0.125, sd 0.1768, t(0.975, 1) = 12.706205, half-width
	// 12.706205 * 0.1768 / sqrt(2) = 1.5883; the bootstrap's means of two
	// differences are 0, 0.125 or 0.25, the ends with chance 1/4 each.
	want := "variant,seeds,steps,reward_auc,sd,diff,t_lo,t_hi,ci_lo,ci_hi\n" +
		"grpo,2,3,37.5,17.7,0.0,,,0.0,0.0\n" +
		"no-gold,2,3,50.0,35.4,12.5,-146.3,171.3,0.0,25.0\n"
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	var s results.Study
	b, err := os.ReadFile(filepath.Join(out, results.StudyFile))
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil || s.Metric != "reward_auc" || s.TInterval != results.IntervalT || len(s.Rows) != 2 || s.Rows[1].TCI == nil {
		t.Errorf("study.json %+v (%v)", s, err)
	}
	// Nothing ran: the run directories hold what the test wrote.
	for _, p := range []string{"grpo/seed-1/recipe.yaml", "no-gold/seed-2/eval.jsonl", "grpo/seed-1/checkpoints"} {
		if _, err := os.Stat(filepath.Join(out, p)); err == nil {
			t.Errorf("%s exists: --analyse ran something", p)
		}
	}
	// study.metric in the recipe, and the flag over it; em reads the
	// evaluations, which these runs do not have.
	if stdout, _, err := runCLI(t, nil, "study", path, "--analyse", "--set", "study.metric=reward_auc", "--format", "csv"); err != nil || stdout != want {
		t.Errorf("study.metric reward_auc: %v\n%s", err, stdout)
	}
	if _, _, err := runCLI(t, nil, "study", path, "--analyse", "--set", "study.metric=reward_auc", "--metric", "em"); err == nil ||
		!strings.Contains(err.Error(), "no search evaluation") {
		t.Errorf("--metric em over study.metric: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--analyse", "--metric", "f1"}, "--metric f1: want one of em, reward_auc"},
		{[]string{"--analyse", "--set", "study.metric=f1"}, `study.metric: must be one of em, reward_auc, got "f1"`},
		{[]string{"--analyse", "--overwrite"}, "none of the others can be"},
		{[]string{"--analyse", "--metric", "reward_auc", "--seeds", "1"}, "1 seed gives none"},
	} {
		if _, _, err := runCLI(t, nil, append([]string{"study", path}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
