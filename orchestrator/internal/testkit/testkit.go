// Package testkit gives the tests of the orchestrator's packages a small
// embedded recipe over the shipped data, with one BM25 index directory per
// test binary (so the index is built once per package's tests).
package testkit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// DataDir is the shipped data (recipes/data), as an absolute path.
var DataDir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "recipes", "data")
}()

// IndexDir is the BM25 index directory Main makes for the test binary.
var IndexDir string

// Main runs the tests of a package with IndexDir made before and removed
// after; a package's TestMain calls os.Exit(testkit.Main(m)).
func Main(m *testing.M) int {
	d, err := os.MkdirTemp("", "hindsearch-bm25-")
	if err != nil {
		panic(err)
	}
	IndexDir = d
	defer os.RemoveAll(d)
	return m.Run()
}

// Recipe writes a small embedded recipe (2 steps of 4 questions x 4
// samples over HotpotQA, evaluations of 4 questions of HotpotQA and NQ)
// into a temp dir, with body appended to its YAML, and loads it with sets
// applied and its run defaults filled.
func Recipe(t testing.TB, body string, sets ...string) *recipes.Recipe {
	t.Helper()
	if IndexDir == "" {
		t.Fatal("testkit.Recipe: the package's TestMain must call testkit.Main")
	}
	dir := t.TempDir()
	y := fmt.Sprintf(`name: test
seed: 3
policy: {urls: [embedded], model: sim/base, concurrency: 8}
judge: {url: embedded, model: sim/judge}
retriever: {url: embedded, corpus: '%[1]s/corpus/passages.jsonl', topk: 3, index_dir: '%[2]s'}
trainer: {url: embedded, base_model: sim/base, lora_rank: 4, learning_rate: 0.3, chunk_size: 8}
train: {steps: 2, batch_size: 4, group_size: 4, data: ['%[1]s/qa/hotpotqa.jsonl']}
rollout: {max_turns: 3}
eval:
  every: 2
  per_dataset: 4
  datasets: {hotpotqa: '%[1]s/qa/hotpotqa.jsonl', nq: '%[1]s/qa/nq.jsonl'}
output: {dir: '%[3]s/run', trajectories: 6}
%[4]s`, DataDir, IndexDir, dir, body)
	path := filepath.Join(dir, "recipe.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := recipes.Load(path, sets, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.ApplyRunDefaults(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// WriteJSON answers a fake server's request with status and v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
