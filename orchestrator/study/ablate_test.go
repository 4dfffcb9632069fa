package study

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/internal/testkit"
)

// ablate runs the base and each variant into its own directory and prints
// one row per variant.
func TestAblate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ablate.yaml")
	body := `name: abl
policy: {urls: [embedded], model: sim/base, concurrency: 8}
judge: {url: embedded, model: sim/judge}
retriever: {url: embedded, corpus: '` + dataDir + `/corpus/passages.jsonl', index_dir: '` + testkit.IndexDir + `'}
trainer: {url: embedded, base_model: sim/base, lora_rank: 4, learning_rate: 0.3}
train: {steps: 1, batch_size: 3, group_size: 3, data: ['` + dataDir + `/qa/hotpotqa.jsonl']}
rollout: {max_turns: 2}
eval: {every: 1, per_dataset: 3, datasets: {hotpotqa: '` + dataDir + `/qa/hotpotqa.jsonl'}}
output: {dir: out}
variants:
  no-gold: [hindsight.gold_answer=false]
  plain: [hindsight.enabled=false]
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	vs, err := Variants(path, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || vs[0].Name != "base" || vs[1].Name != "no-gold" || vs[2].Name != "plain" {
		t.Fatalf("variants %+v", vs)
	}
	if vs[1].Recipe.Hindsight.GoldAnswer || vs[2].Recipe.Hindsight.Enabled || !vs[0].Recipe.Hindsight.Enabled {
		t.Fatal("variant overrides not applied")
	}
	var out bytes.Buffer
	rows, err := Ablate(context.Background(), vs, AblateOptions{Out: &out, Format: "table"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, want := range []string{"| base ", "| no-gold ", "| plain ", "plain: hindsight=off", "no-gold: hindsight=on gold=off"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ablate output lacks %q", want)
		}
	}
	for _, v := range []string{"base", "no-gold", "plain"} {
		if _, err := os.Stat(filepath.Join(dir, "out", v, "eval.jsonl")); err != nil {
			t.Error(err)
		}
	}
	if _, err := Variants(path, nil, nil, []string{"nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("--only nope: %v", err)
	}
}

// dataDir is the shipped data.
var dataDir = testkit.DataDir

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
