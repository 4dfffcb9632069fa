package recipes

import (
	"os"
	"path/filepath"
	"testing"
)

// The recipe loader never panics: any file, any overrides, an error or a
// recipe.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("name: x\ntrain:\n  steps: 3\n"), "train.steps=4")
	f.Add([]byte("train: 5\n"), "eval.datasets.nq=")
	f.Add([]byte("variants:\n  a: [b=c]\nsim:\n  faults:\n    policy: {rate: 2}\n"), "policy.urls=a,b")
	f.Add([]byte("- [\n"), "=")
	f.Add([]byte("base: r.yaml\n"), "train.steps=1")
	f.Add([]byte("base: nope.yaml\n"), "base=r.yaml")
	f.Add([]byte("base: {a: 1}\n"), "hindsight.loss=none")
	f.Fuzz(func(t *testing.T, body []byte, set string) {
		dir := t.TempDir()
		p := filepath.Join(dir, "r.yaml")
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Load(p, []string{set}, []string{"ORCH_SEED=3"})
		if err == nil && r == nil {
			t.Fatal("no recipe and no error")
		}
	})
}
