package recipes

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRedacted(t *testing.T) {
	r := valid(t)
	r.Policy.URLs = []string{"http://user:s3cr3t@a:8000/v1", "http://b:8000", Embedded}
	r.Judge.URL = "https://api.example/v1?api_key=sk-123&model=x"
	r.Judge.APIKeyEnv = "JUDGE_KEY"
	r.Retriever.URL = "http://tok3n@r:9000/retrieve?sk-bare#frag"
	r.Trainer.URL = "http://%zz@x"

	red := r.Redacted()
	want := []string{"http://REDACTED@a:8000/v1", "http://b:8000", Embedded}
	if !reflect.DeepEqual(red.Policy.URLs, want) {
		t.Errorf("policy.urls = %q, want %q", red.Policy.URLs, want)
	}
	checks := []struct{ key, got, want string }{
		{"judge.url", red.Judge.URL, "https://api.example/v1?api_key=REDACTED&model=REDACTED"},
		{"judge.api_key_env", red.Judge.APIKeyEnv, "JUDGE_KEY"},
		{"retriever.url", red.Retriever.URL, "http://REDACTED@r:9000/retrieve?REDACTED#REDACTED"},
		{"trainer.url", red.Trainer.URL, "REDACTED"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.key, c.got, c.want)
		}
	}
	out, err := red.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cr3t", "user", "sk-123", "tok3n", "sk-bare", "%zz"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("redacted YAML holds %q:\n%s", secret, out)
		}
	}

	// The original is untouched, and the copy shares no slice or map.
	if r.Policy.URLs[0] != "http://user:s3cr3t@a:8000/v1" || r.Judge.URL != "https://api.example/v1?api_key=sk-123&model=x" {
		t.Error("Redacted changed its receiver")
	}
	red.Train.Data[0] = "changed"
	red.Eval.Datasets["hotpotqa"] = "changed"
	if r.Train.Data[0] == "changed" || r.Eval.Datasets["hotpotqa"] == "changed" {
		t.Error("Redacted shares train.data or eval.datasets with its receiver")
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	f := newFixture(t)
	path := f.write(t, minimal+`name: round.trip-1
seed: -7
policy:
  urls: [http://a:8000, http://b:8000]
trainer:
  learning_rate: 3e-7
  eps: 1.0e-8
  loss: ppo
hindsight:
  gold_answer: false
  loss: reverse_kl
  broadcast: trajectory
  teacher: Qwen/Qwen2.5-7B-Instruct
  coef: 0.3
  prompt: |
    Critique the searches.
    Question: {question}
  hint_template: "Note: {critique}\n\n"
eval:
  datasets:
    nq: qa/nq.jsonl
    hotpotqa: qa/hotpotqa.jsonl
retriever:
  index_dir: cache
`)
	r1 := mustLoad(t, path, []string{"train.top_k=50"}, nil)
	out, err := r1.YAML()
	if err != nil {
		t.Fatal(err)
	}
	// Schema order, recipe key names.
	text := string(out)
	last := -1
	for _, k := range []string{"name:", "seed:", "policy:", "judge:", "retriever:", "trainer:", "sync:", "train:", "rollout:", "hindsight:", "eval:", "output:", "http:", "sim:", "  gold_answer:", "  retry_wait_min_ms:"} {
		i := strings.Index(text, "\n"+k)
		if k == "name:" && strings.HasPrefix(text, k) {
			i = 0
		}
		if i < 0 || (i < last && !strings.HasPrefix(k, " ")) {
			t.Errorf("YAML lacks %q or has it out of order:\n%s", k, text)
		}
		if !strings.HasPrefix(k, " ") {
			last = i
		}
	}

	saved := filepath.Join(t.TempDir(), "elsewhere", "recipe.yaml")
	writeFile(t, saved, text)
	r2 := mustLoad(t, saved, nil, nil)
	if !reflect.DeepEqual(r1, r2) {
		t.Errorf("round trip differs:\n%+v\n%+v\nYAML:\n%s", *r1, *r2, text)
	}

	// Defaults round-trip too (empty strings, empty map, -1, 1e-8).
	d := valid(t)
	out, err = d.YAML()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, saved, string(out))
	r3 := mustLoad(t, saved, nil, nil)
	d.Output.Dir = filepath.Join(filepath.Dir(saved), "runs/hindsearch")
	if !reflect.DeepEqual(*r3, d) {
		t.Errorf("defaults round trip differs:\n%+v\n%+v\nYAML:\n%s", *r3, d, out)
	}
}

func TestSwitches(t *testing.T) {
	r := Defaults()
	r.Hindsight.Prompt = "Critique: {question}"
	r.Hindsight.Coef = 0.05
	got := r.Switches()
	want := "hindsight=on gold=on loss=clamp broadcast=search teacher=self coef=0.05 clamp=1 judge=Qwen/Qwen2.5-7B-Instruct prompt=custom-"
	if !strings.HasPrefix(got, want) || len(got) != len(want)+8 {
		t.Errorf("Switches() = %q, want %q + 8 hex digits", got, want)
	}
	r2 := r
	r2.Hindsight.Prompt = "Another prompt"
	if r2.Switches() == got {
		t.Error("different prompts give the same switches")
	}
}
