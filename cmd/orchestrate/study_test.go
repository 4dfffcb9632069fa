package main

import (
	"encoding/json"
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
	if _, _, err := runCLI(t, nil, "study", path, "--base", "nope"); err == nil || !strings.Contains(err.Error(), "--base nope") {
		t.Errorf("--base nope: %v", err)
	}
	if _, _, err := runCLI(t, nil, "study", path, "--set", "study.datasets=nq"); err == nil || !strings.Contains(err.Error(), "study.datasets") {
		t.Errorf("study.datasets=nq: %v", err)
	}
}
