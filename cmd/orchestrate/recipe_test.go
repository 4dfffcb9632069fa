package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// printed parses the YAML that recipe check printed into nested maps.
func printed(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("recipe check printed no YAML: %v\n%s", err, out)
	}
	return m
}

// at returns the value at a dotted key path of m.
func at(m map[string]any, key string) any {
	var cur any = m
	for seg := range strings.SplitSeq(key, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[seg]
	}
	return cur
}

func TestRecipeCheckBaseChain(t *testing.T) {
	const child = "../../recipes/testdata/sim-nogold.yaml"
	out, stderr, err := runCLI(t, nil, "recipe", "check", child)
	if err != nil {
		t.Fatalf("recipe check: %v (stderr %q)", err, stderr)
	}
	first, rest, _ := strings.Cut(out, "\n")
	if want := "# layered over the defaults, in order: ../../recipes/sim.yaml, " + child; first != want {
		t.Errorf("first line %q, want %q", first, want)
	}
	if strings.Contains(out, "\nbase:") {
		t.Errorf("the printed recipe is not flat:\n%s", out)
	}
	m := printed(t, out)
	checks := []struct {
		key  string
		want any
	}{
		{"name", "sim-nogold"},           // the child's
		{"train.steps", 2},               // the child's
		{"hindsight.gold_answer", false}, // the child's
		{"hindsight.loss", "clamp"},      // the base's, beside it
		{"trainer.learning_rate", 0.2},   // the base's
		{"retriever.corpus", abs(t, "../../recipes/data/corpus/passages.jsonl")},     // relative to sim.yaml
		{"output.dir", abs(t, "../../runs/sim-nogold")},                              // sim.yaml's, the child's name
		{"eval.datasets.bamboogle", abs(t, "../../recipes/data/qa/bamboogle.jsonl")}, // relative to sim.yaml
	}
	for _, c := range checks {
		if got := at(m, c.key); got != c.want {
			t.Errorf("%s = %v, want %v", c.key, got, c.want)
		}
	}

	// The flat form loads alone (no comment then) to the same recipe.
	saved := filepath.Join(t.TempDir(), "saved.yaml")
	if err := os.WriteFile(saved, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	out2, _, err := runCLI(t, nil, "recipe", "check", saved)
	if err != nil || out2 != rest {
		t.Errorf("the printed recipe does not round-trip: %v\n%s\n---\n%s", err, rest, out2)
	}

	// The environment and --set override what a base sets.
	out, _, err = runCLI(t, []string{"ORCH_TRAINER_LEARNING_RATE=0.1"}, "recipe", "check", child, "--set", "hindsight.loss=reverse_kl", "--set", "train.steps=3")
	if err != nil {
		t.Fatal(err)
	}
	m = printed(t, out)
	for key, want := range map[string]any{"hindsight.loss": "reverse_kl", "train.steps": 3, "trainer.learning_rate": 0.1, "hindsight.gold_answer": false} {
		if got := at(m, key); got != want {
			t.Errorf("with overrides: %s = %v, want %v", key, got, want)
		}
	}
}

func TestRecipeCheckPaperAblation(t *testing.T) {
	const child = "../../recipes/hindsearch-qwen2.5-3b-lora.yaml"
	out, _, err := runCLI(t, nil, "recipe", "check", child)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# layered over the defaults, in order: ../../recipes/hindsearch-qwen2.5-3b.yaml, " + child + "\n"; !strings.HasPrefix(out, want) {
		t.Errorf("output starts %q, want %q", strings.SplitN(out, "\n", 2)[0], want)
	}
	m := printed(t, out)
	for key, want := range map[string]any{
		"name": "hindsearch-qwen2.5-3b-lora", "hindsight.teacher": "initial", "sync.kind": "lora",
		"hindsight.gold_answer": true, "judge.url": "http://127.0.0.1:8100", "judge.api_key_env": "JUDGE_API_KEY",
		"train.batch_size": 512, "output.dir": abs(t, "../../runs/hindsearch-qwen2.5-3b-lora"),
	} {
		if got := at(m, key); got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
}

func TestRecipeCheckBaseErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sim := abs(t, simRecipe)
	// Secrets a base puts in URLs are redacted in the flat output.
	base := write("base.yaml", fmt.Sprintf("base: %s\njudge:\n  url: http://user:pass@judge:8100/v1?key=s3cret\n", sim))
	child := write("child.yaml", "base: base.yaml\nname: c\n")
	out, _, err := runCLI(t, nil, "recipe", "check", child)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "user:pass") || strings.Contains(out, "s3cret") || !strings.Contains(out, "http://REDACTED@judge:8100/v1?key=REDACTED") {
		t.Errorf("secrets of a base not redacted:\n%s", out)
	}
	if want := fmt.Sprintf("# layered over the defaults, in order: %s, %s, %s\n", sim, base, child); !strings.HasPrefix(out, want) {
		t.Errorf("output starts %q, want %q", strings.SplitN(out, "\n", 2)[0], want)
	}

	// An unknown key in a base names that file and the line.
	write("base.yaml", fmt.Sprintf("base: %s\nhindsight:\n  gold_anwser: false\n", sim))
	_, _, err = runCLI(t, nil, "recipe", "check", child)
	if want := fmt.Sprintf(`recipe %s (base of %s): unknown key "hindsight.gold_anwser" (line 3)`, base, child); err == nil || err.Error() != want {
		t.Errorf("unknown key in a base: %v, want %s", err, want)
	}
	// A missing base names the file and the line of the base key.
	write("child.yaml", "name: c\nbase: nope.yaml\n")
	_, _, err = runCLI(t, nil, "recipe", "check", child)
	if want := fmt.Sprintf("recipe %s: base %s: no such file or directory (line 2)", child, filepath.Join(dir, "nope.yaml")); err == nil || err.Error() != want {
		t.Errorf("missing base: %v, want %s", err, want)
	}
	// A cycle names the chain.
	write("child.yaml", "base: base.yaml\n")
	write("base.yaml", "base: child.yaml\n")
	_, _, err = runCLI(t, nil, "recipe", "check", child)
	if want := fmt.Sprintf("base: cycle %s -> %s -> %s (line 1)", child, base, child); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("cycle: %v, want it to contain %s", err, want)
	}
}
