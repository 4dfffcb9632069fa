package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hindsearch/hindsearch/orchestrator/bench"
	"github.com/hindsearch/hindsearch/recipes"
)

const simRecipe = "../../recipes/sim.yaml"

// runCLI runs the command line args on a fresh command tree and returns its
// stdout, stderr and error.
func runCLI(t *testing.T, environ []string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCmd(&stdout, &stderr, environ)
	root.SetArgs(args)
	// A guard against a hang, not a timing: generous enough for a BM25
	// index build under the race detector on a busy 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return stdout.String(), stderr.String(), err
}

// checked is the part of a printed recipe the tests look at.
type checked struct {
	Name   string `yaml:"name"`
	Policy struct {
		URLs []string `yaml:"urls"`
	} `yaml:"policy"`
	Judge struct {
		URL       string `yaml:"url"`
		APIKeyEnv string `yaml:"api_key_env"`
	} `yaml:"judge"`
	Retriever struct {
		Corpus string `yaml:"corpus"`
	} `yaml:"retriever"`
	Train struct {
		Steps int      `yaml:"steps"`
		Data  []string `yaml:"data"`
	} `yaml:"train"`
	Eval struct {
		Datasets map[string]string `yaml:"datasets"`
	} `yaml:"eval"`
	Output struct {
		Dir string `yaml:"dir"`
	} `yaml:"output"`
}

func parseChecked(t *testing.T, out string) checked {
	t.Helper()
	var c checked
	if err := yaml.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("recipe check printed no YAML: %v\n%s", err, out)
	}
	return c
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRecipeCheckSim(t *testing.T) {
	out, stderr, err := runCLI(t, nil, "recipe", "check", simRecipe)
	if err != nil {
		t.Fatalf("recipe check: %v (stderr %q)", err, stderr)
	}
	c := parseChecked(t, out)
	if c.Name != "sim" || !strings.Contains(out, "name: sim\n") {
		t.Errorf("name = %q\n%s", c.Name, out)
	}
	if want := abs(t, "../../recipes/data/corpus/passages.jsonl"); c.Retriever.Corpus != want {
		t.Errorf("retriever.corpus = %q, want %q", c.Retriever.Corpus, want)
	}
	if want := []string{abs(t, "../../recipes/data/qa/nq.jsonl"), abs(t, "../../recipes/data/qa/hotpotqa.jsonl")}; strings.Join(c.Train.Data, ",") != strings.Join(want, ",") {
		t.Errorf("train.data = %q, want %q", c.Train.Data, want)
	}
	if want := abs(t, "../../runs/sim"); c.Output.Dir != want {
		t.Errorf("output.dir = %q, want %q ({name} replaced, absolute)", c.Output.Dir, want)
	}
	want, err := recipes.Load(simRecipe, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Eval.Datasets) != len(want.Eval.Datasets) || len(c.Eval.Datasets) == 0 {
		t.Errorf("eval.datasets = %v, want %v", c.Eval.Datasets, want.Eval.Datasets)
	}
	for name, p := range c.Eval.Datasets {
		if !filepath.IsAbs(p) {
			t.Errorf("eval.datasets.%s = %q is not absolute", name, p)
		}
	}
	if c.Train.Steps != want.Train.Steps || c.Train.Steps == 0 {
		t.Errorf("train.steps = %d, want %d", c.Train.Steps, want.Train.Steps)
	}

	// What check prints loads again, from anywhere, to the same recipe.
	saved := filepath.Join(t.TempDir(), "saved.yaml")
	if err := os.WriteFile(saved, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	out2, _, err := runCLI(t, nil, "recipe", "check", saved)
	if err != nil || out2 != out {
		t.Errorf("the printed recipe does not round-trip: %v\n%s\n---\n%s", err, out, out2)
	}
}

func TestRecipeCheckOverrides(t *testing.T) {
	base, err := recipes.Load(simRecipe, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if base.Train.Steps == 3 || base.Train.Steps == 4 || base.Train.Steps == 6 {
		t.Fatalf("sim.yaml has train.steps %d: pick other override values", base.Train.Steps)
	}
	out, _, err := runCLI(t, nil, "recipe", "check", simRecipe, "--set", "train.steps=3")
	if err != nil {
		t.Fatal(err)
	}
	if c := parseChecked(t, out); c.Train.Steps != 3 {
		t.Errorf("--set train.steps=3: steps %d", c.Train.Steps)
	}

	out, _, err = runCLI(t, []string{"HOME=/nonexistent", "ORCH_TRAIN_STEPS=4"}, "recipe", "check", simRecipe)
	if err != nil {
		t.Fatal(err)
	}
	if c := parseChecked(t, out); c.Train.Steps != 4 {
		t.Errorf("ORCH_TRAIN_STEPS=4: steps %d", c.Train.Steps)
	}

	// --set wins over the environment; repeated sets apply in order.
	out, _, err = runCLI(t, []string{"ORCH_TRAIN_STEPS=4"}, "recipe", "check", simRecipe, "--set", "train.steps=5", "--set", "train.steps=6")
	if err != nil {
		t.Fatal(err)
	}
	if c := parseChecked(t, out); c.Train.Steps != 6 {
		t.Errorf("env 4 then --set 5, 6: steps %d, want 6", c.Train.Steps)
	}

	// Each command tree reads only its own environ: the next one is clean.
	out, _, err = runCLI(t, nil, "recipe", "check", simRecipe)
	if err != nil {
		t.Fatal(err)
	}
	if c := parseChecked(t, out); c.Train.Steps != base.Train.Steps {
		t.Errorf("fresh root: steps %d, want %d", c.Train.Steps, base.Train.Steps)
	}
}

func TestRecipeCheckErrors(t *testing.T) {
	_, _, err := runCLI(t, nil, "recipe", "check", simRecipe, "--set", "trian.steps=3")
	if err == nil || !strings.Contains(err.Error(), `"trian.steps"`) {
		t.Errorf("unknown --set key: %v", err)
	}
	_, _, err = runCLI(t, nil, "recipe", "check", simRecipe, "--set", "train.steps")
	if err == nil || !strings.Contains(err.Error(), "key=value") {
		t.Errorf("--set without =: %v", err)
	}
	_, _, err = runCLI(t, []string{"ORCH_TRIAN_STEPS=3"}, "recipe", "check", simRecipe)
	if err == nil || !strings.Contains(err.Error(), "ORCH_TRIAN_STEPS") {
		t.Errorf("unknown ORCH_ variable: %v", err)
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\ntrain:\n  stepz: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCLI(t, nil, "recipe", "check", bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `"train.stepz"`) || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("unknown key in file: %v, want it to name %s, train.stepz and line 3", err, bad)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, _, err = runCLI(t, nil, "recipe", "check", missing)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}

	if _, _, err := runCLI(t, nil, "recipe", "check"); err == nil {
		t.Error("recipe check without a file succeeded")
	}
	if _, _, err := runCLI(t, nil, "recipe", "check", simRecipe, "extra"); err == nil {
		t.Error("recipe check with two files succeeded")
	}
}

func TestRecipeCheckRedactsSecrets(t *testing.T) {
	dir := t.TempDir()
	data := abs(t, "../../recipes/data")
	body := "name: redaction\n" +
		"policy:\n  urls: [\"http://127.0.0.1:8000/v1?token=qsecret&x\"]\n" +
		"judge:\n  url: http://user:secret@127.0.0.1:9/\n  model: judge\n  api_key_env: JUDGE_KEY\n" +
		"retriever:\n  url: http://127.0.0.1:8001#fsecret\n  corpus: " + filepath.Join(data, "corpus/passages.jsonl") + "\n" +
		"trainer:\n  url: http://admin:tsecret@127.0.0.1:8002/\n  checkpoints_dir: " + dir + "\n  base_model: m\n" +
		"train:\n  data: [" + filepath.Join(data, "qa/nq.jsonl") + "]\n"
	path := filepath.Join(dir, "secrets.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runCLI(t, []string{"JUDGE_KEY=ksecret"}, "recipe", "check", path)
	if err != nil {
		t.Fatalf("recipe check: %v", err)
	}
	for _, s := range []string{"qsecret", "fsecret", "tsecret", "ksecret", "user:secret", ":secret@", "admin"} {
		if strings.Contains(out, s) || strings.Contains(stderr, s) {
			t.Errorf("output holds %q:\n%s%s", s, out, stderr)
		}
	}
	c := parseChecked(t, out)
	if want := "http://" + recipes.RedactedMark + "@127.0.0.1:9/"; c.Judge.URL != want {
		t.Errorf("judge.url = %q, want %q", c.Judge.URL, want)
	}
	if len(c.Policy.URLs) != 1 || !strings.Contains(c.Policy.URLs[0], "token=REDACTED") {
		t.Errorf("policy.urls = %q", c.Policy.URLs)
	}
	if c.Judge.APIKeyEnv != "JUDGE_KEY" {
		t.Errorf("judge.api_key_env = %q: the variable's name should stay", c.Judge.APIKeyEnv)
	}

	// The same through --set.
	out, _, err = runCLI(t, nil, "recipe", "check", simRecipe, "--set", "judge.url=http://user:secret@127.0.0.1:9/")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, ":secret@") || !strings.Contains(out, "REDACTED@127.0.0.1:9") {
		t.Errorf("--set judge.url with a password:\n%s", out)
	}
}

func TestRunBadRecipe(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"run", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"unknown set", []string{"run", simRecipe, "--set", "trian.steps=1"}, `"trian.steps"`},
		{"invalid value", []string{"run", simRecipe, "--set", "train.steps=many"}, "train.steps"},
		{"remote trainer without checkpoints", []string{"run", simRecipe, "--set", "trainer.url=http://127.0.0.1:9", "--set", "output.dir=" + dir}, "trainer.checkpoints_dir"},
		{"no recipe", []string{"run"}, "arg"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := runCLI(t, nil, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("run %q: %v, want an error containing %q", c.args, err, c.want)
			}
			if strings.Contains(out, "step ") {
				t.Errorf("a failed run printed progress:\n%s", out)
			}
		})
	}

	// A corpus that is not JSONL fails before anything starts or is written.
	corpus := filepath.Join(dir, "corpus.jsonl")
	if err := os.WriteFile(corpus, []byte("not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	_, _, err := runCLI(t, nil, "run", simRecipe, "--set", "retriever.corpus="+corpus, "--set", "output.dir="+outDir)
	if err == nil || !strings.Contains(err.Error(), "retriever.corpus") || !strings.Contains(err.Error(), corpus+":1:") {
		t.Errorf("bad corpus: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outDir, "state.json")); err == nil {
		t.Error("a failed run wrote state.json")
	}
}

func TestServeRetrieverNeedsCorpus(t *testing.T) {
	_, _, err := runCLI(t, nil, "serve", "retriever")
	if err == nil || !strings.Contains(err.Error(), "--corpus") {
		t.Errorf("serve retriever without --corpus: %v", err)
	}
}

func TestHelp(t *testing.T) {
	out, _, err := runCLI(t, nil, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"run", "recipe", "serve"} {
		if !strings.Contains(out, s) {
			t.Errorf("help lacks %q:\n%s", s, out)
		}
	}
	if _, _, err := runCLI(t, nil, "nosuchcommand"); err == nil {
		t.Error("an unknown command succeeded")
	}
}

// The retrieval scale benchmark from the command line: one engine in
// process, each phase as long as --seconds, the report as JSON; a
// non-positive --seconds is refused naming the flag.
func TestBenchRetrievalCLI(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	out, _, err := runCLI(t, nil, "bench", "--only", "retrieval", "--passages", "300", "--engines", "static",
		"--seconds", "0.2", "--recipe", simRecipe, "--dir", dir, "--json", report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "retrieval at 300 passages") || !strings.Contains(out, "batch64") || !strings.Contains(out, "single-c8") || !strings.Contains(out, "inproc-1thread") {
		t.Fatalf("printed:\n%s", out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var reps []struct {
		Engine   string `json:"engine"`
		Passages int    `json:"passages"`
	}
	if err := json.Unmarshal(b, &reps); err != nil || len(reps) != 1 || reps[0].Engine != "static" || reps[0].Passages != 300 {
		t.Fatalf("report %s: %v", b, err)
	}
	if strings.Contains(out, "not timed") {
		t.Fatalf("a first build printed as reused:\n%s", out)
	}
	// Again in the same --dir: the index is reused, and its build is not
	// printed as if timed.
	out, _, err = runCLI(t, nil, "bench", "--only", "retrieval", "--passages", "300", "--engines", "static",
		"--seconds", "0.2", "--recipe", simRecipe, "--dir", dir)
	if err != nil || !strings.Contains(out, "build not timed") {
		t.Fatalf("reused: %v\n%s", err, out)
	}
	_, _, err = runCLI(t, nil, "bench", "--only", "retrieval", "--passages", "300", "--seconds", "0", "--recipe", simRecipe, "--dir", dir)
	if err == nil || !strings.Contains(err.Error(), "--seconds") {
		t.Fatalf("--seconds 0: %v", err)
	}
	// A misspelt group runs nothing: refused, naming the groups.
	_, _, err = runCLI(t, nil, "bench", "--only", "afinity", "--recipe", simRecipe, "--dir", dir)
	if err == nil || !strings.Contains(err.Error(), "--only afinity") || !strings.Contains(err.Error(), "affinity") {
		t.Fatalf("--only afinity: %v", err)
	}
	// A Bleve variant: two shards, each merged into one segment.
	out, _, err = runCLI(t, nil, "bench", "--only", "retrieval", "--passages", "300", "--engines", "bleve-shards2-terms",
		"--seconds", "0.2", "--recipe", simRecipe, "--dir", dir)
	if err != nil || !strings.Contains(out, "bleve-shards2-terms: build") || !strings.Contains(out, "(2 segments)") {
		t.Fatalf("bleve-shards2-terms: %v\n%s", err, out)
	}
	for _, bad := range []string{"bleve-shards0", "bleve-fast", "lucene"} {
		_, _, err = runCLI(t, nil, "bench", "--only", "retrieval", "--passages", "300", "--engines", "static,"+bad,
			"--seconds", "0.2", "--recipe", simRecipe, "--dir", dir)
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("--engines %s: %v", bad, err)
		}
	}
}

// bench's flags that cannot work are refused before anything runs:
// --seeds below 1, and --docs with a part of the bench (the documents hold
// the whole bench's figures); no document is touched.
func TestBenchFlagsRefused(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "doc.md")
	text := "x\n" + bench.DocsBegin + "\n" + bench.DocsEnd + "\n"
	if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--seeds", "0"}, "--seeds 0"},
		{[]string{"--docs", doc, "--only", "speedup"}, "--docs"},
		{[]string{"--docs", doc, "--scale", "0.5"}, "--docs"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"bench", "--recipe", simRecipe}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench %v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	if b, _ := os.ReadFile(doc); string(b) != text {
		t.Errorf("document changed: %q", b)
	}
}

// The figures' provenance: the checkout's commit (marked -dirty when code
// has changes) and the command as run, --docs left out.
func TestBenchProvenance(t *testing.T) {
	if err := exec.Command("git", "rev-parse", "HEAD").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	cmd := newBenchCmd(&env{})
	if err := cmd.Flags().Parse([]string{"--seeds", "3", "--docs", "README.md"}); err != nil {
		t.Fatal(err)
	}
	p, err := benchProvenance(context.Background(), cmd.Flags(), []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{7,}(-dirty)?$`).MatchString(p.Commit) || p.Command != "orchestrate bench --seeds=3" || p.Date == "" {
		t.Errorf("%+v", p)
	}
}
