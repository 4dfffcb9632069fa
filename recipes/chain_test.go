package recipes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeTree writes files (path relative to a new temporary directory: body)
// and returns the directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, body := range files {
		writeFile(t, filepath.Join(dir, p), body)
	}
	return dir
}

// chainTree is a three-level chain: child.yaml in the root names
// mid/mid.yaml, which names ../grand/grand.yaml. Each file sets relative
// paths of its own.
var chainTree = map[string]string{
	"grand/grand.yaml": `name: grand
policy:
  urls: [http://a:8000, http://b:8000]
  concurrency: 7
retriever:
  corpus: corpus.jsonl
hindsight:
  gold_answer: true
  loss: reverse_kl
  broadcast: response
  coef: 0.5
train:
  steps: 9
  data: [qa/g.jsonl]
eval:
  datasets:
    nq: qa/g.jsonl
    hotpotqa: qa/g.jsonl
output:
  dir: out/{name}
variants:
  v1: [train.steps=1]
  v2: [hindsight.coef=2]
`,
	"grand/corpus.jsonl": "{}\n",
	"grand/qa/g.jsonl":   "{}\n",
	"mid/mid.yaml": `# the middle of the chain
base: ../grand/grand.yaml
hindsight:
  gold_answer: false
train:
  batch_size: 3
eval:
  datasets:
    triviaqa: qa/m.jsonl
`,
	"mid/qa/m.jsonl": "{}\n",
	"child.yaml": `base: mid/mid.yaml
name: child
policy:
  urls: [http://c:8000]
sync:
  dir: s
eval:
  datasets:
    hotpotqa: ""
variants:
  v2: [hindsight.coef=3]
  v3: [hindsight.enabled=false]
`,
}

func TestBaseChainMergesAndResolvesPathsPerFile(t *testing.T) {
	root := writeTree(t, chainTree)
	t.Chdir(t.TempDir()) // paths from files must not depend on the working directory
	r, files, err := LoadChain(filepath.Join(root, "child.yaml"), nil, nil)
	if err != nil {
		t.Fatalf("LoadChain: %v", err)
	}
	grand, mid := filepath.Join(root, "grand"), filepath.Join(root, "mid")
	wantFiles := []string{filepath.Join(grand, "grand.yaml"), filepath.Join(mid, "mid.yaml"), filepath.Join(root, "child.yaml")}
	if !reflect.DeepEqual(files, wantFiles) {
		t.Errorf("files = %q, want %q (deepest base first)", files, wantFiles)
	}

	want := Defaults()
	want.Name = "child"                          // child over grand
	want.Policy.URLs = []string{"http://c:8000"} // a list replaces
	want.Policy.Concurrency = 7                  // grand's, kept beside the child's policy.urls
	want.Retriever.Corpus = filepath.Join(grand, "corpus.jsonl")
	want.Hindsight.GoldAnswer = false            // mid over grand
	want.Hindsight.Loss = HindsightLossReverseKL // grand's other hindsight keys stay
	want.Hindsight.Broadcast = BroadcastResponse
	want.Hindsight.Coef = 0.5
	want.Train.Steps = 9
	want.Train.BatchSize = 3
	want.Train.Data = []string{filepath.Join(grand, "qa/g.jsonl")}
	want.Eval.Datasets = map[string]string{
		"nq":       filepath.Join(grand, "qa/g.jsonl"), // relative to grand.yaml
		"triviaqa": filepath.Join(mid, "qa/m.jsonl"),   // relative to mid.yaml
		// hotpotqa: dropped by the child's empty path
	}
	want.Sync.Dir = filepath.Join(root, "s")               // relative to child.yaml
	want.Output.Dir = filepath.Join(grand, "out", "child") // grand's directory, the child's name
	want.Variants = map[string][]string{
		"v1": {"train.steps=1"},           // inherited
		"v2": {"hindsight.coef=3"},        // replaced by the child
		"v3": {"hindsight.enabled=false"}, // added by the child
	}
	if !reflect.DeepEqual(*r, want) {
		t.Errorf("resolved chain =\n%+v\nwant\n%+v", *r, want)
	}

	// Load is LoadChain without the files.
	r2, err := Load(filepath.Join(root, "child.yaml"), nil, nil)
	if err != nil || !reflect.DeepEqual(r2, r) {
		t.Errorf("Load = %+v, %v; want LoadChain's recipe", r2, err)
	}
}

func TestBaseDefaultsRelativeToLoadedFile(t *testing.T) {
	// The defaults' relative paths (retriever.corpus, output.dir) belong to
	// the file named on the command line, not to its base.
	root := writeTree(t, map[string]string{
		"lib/base.yaml":                  "train:\n  data: [q.jsonl]\n",
		"lib/q.jsonl":                    "{}\n",
		"exp/child.yaml":                 "base: ../lib/base.yaml\nname: c\n",
		"exp/data/corpus/passages.jsonl": "{}\n",
	})
	r := mustLoad(t, filepath.Join(root, "exp/child.yaml"), nil, nil)
	if want := filepath.Join(root, "exp/data/corpus/passages.jsonl"); r.Retriever.Corpus != want {
		t.Errorf("retriever.corpus = %q, want %q", r.Retriever.Corpus, want)
	}
	if want := filepath.Join(root, "exp/runs/c"); r.Output.Dir != want {
		t.Errorf("output.dir = %q, want %q", r.Output.Dir, want)
	}
	if want := filepath.Join(root, "lib/q.jsonl"); r.Train.Data[0] != want {
		t.Errorf("train.data[0] = %q, want %q", r.Train.Data[0], want)
	}
}

func TestBaseOverriddenByEnvAndSet(t *testing.T) {
	root := writeTree(t, chainTree)
	cwd := t.TempDir()
	writeFile(t, filepath.Join(cwd, "mine.jsonl"), "{}\n")
	t.Chdir(cwd)
	r := mustLoad(t, filepath.Join(root, "child.yaml"),
		[]string{"hindsight.loss=clamp", "hindsight.gold_answer=true", "eval.datasets.nq=mine.jsonl"},
		[]string{"ORCH_TRAIN_STEPS=4", "ORCH_HINDSIGHT_COEF=0.25"})
	checks := []struct {
		key       string
		got, want any
	}{
		{"hindsight.loss (grand, then --set)", r.Hindsight.Loss, HindsightLossClamp},
		{"hindsight.gold_answer (mid, then --set)", r.Hindsight.GoldAnswer, true},
		{"train.steps (grand, then ORCH_)", r.Train.Steps, 4},
		{"hindsight.coef (grand, then ORCH_)", r.Hindsight.Coef, 0.25},
		{"eval.datasets.nq (grand, then --set: the working directory)", r.Eval.Datasets["nq"], filepath.Join(cwd, "mine.jsonl")},
		{"eval.datasets.triviaqa (mid, untouched)", r.Eval.Datasets["triviaqa"], filepath.Join(root, "mid/qa/m.jsonl")},
		{"hindsight.broadcast (grand, untouched)", r.Hindsight.Broadcast, BroadcastResponse},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.key, c.got, c.want)
		}
	}

	// base is not a schema key: it cannot be overridden.
	_, err := Load(filepath.Join(root, "child.yaml"), []string{"base=x.yaml"}, nil)
	wantErr(t, err, `unknown recipe key "base"`)
	_, err = Load(filepath.Join(root, "child.yaml"), nil, []string{"ORCH_BASE=x.yaml"})
	wantErr(t, err, "environment ORCH_BASE: no recipe key of that name")
	// Nor is it a variant key.
	tree := map[string]string{"r.yaml": minimal + "variants:\n  v: [base=x.yaml]\n", "qa/nq.jsonl": "{}\n", "data/corpus/passages.jsonl": "{}\n"}
	_, err = Load(filepath.Join(writeTree(t, tree), "r.yaml"), nil, nil)
	wantErr(t, err, `variants.v[0]: "base=x.yaml": unknown recipe key "base"`)
}

func TestBaseCycle(t *testing.T) {
	root := writeTree(t, map[string]string{
		"a.yaml":     "name: a\nbase: sub/b.yaml\n",
		"sub/b.yaml": "# b\nbase: ../a.yaml\n",
		"self.yaml":  "base: ./self.yaml\n",
		"c.yaml":     "base: d.yaml\n",
		"d.yaml":     "\n\nbase: sub/../d.yaml\n",
	})
	a, b := filepath.Join(root, "a.yaml"), filepath.Join(root, "sub/b.yaml")
	_, err := Load(a, nil, nil)
	wantErr(t, err, fmt.Sprintf("recipe %s (base of %s): base: cycle %s -> %s -> %s (line 2)", b, a, a, b, a))

	self := filepath.Join(root, "self.yaml")
	_, err = Load(self, nil, nil)
	wantErr(t, err, fmt.Sprintf("recipe %s: base: cycle %s -> %s (line 1)", self, self, self))

	// A cycle is found whatever the spelling of the path.
	c, d := filepath.Join(root, "c.yaml"), filepath.Join(root, "d.yaml")
	_, err = Load(c, nil, nil)
	wantErr(t, err, fmt.Sprintf("base: cycle %s -> %s -> %s (line 3)", c, d, d))
}

func TestBaseMissing(t *testing.T) {
	root := writeTree(t, map[string]string{
		"child.yaml": "name: c\n\nbase: lib/nope.yaml\n",
		"mid.yaml":   "base: child.yaml\n",
	})
	child := filepath.Join(root, "child.yaml")
	_, err := Load(child, nil, nil)
	wantErr(t, err, fmt.Sprintf("recipe %s: base %s: no such file or directory (line 3)", child, filepath.Join(root, "lib/nope.yaml")))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(%v, fs.ErrNotExist) = false", err)
	}
	// A base must be a regular file.
	writeFile(t, child, "base: lib\n")
	if err := os.MkdirAll(filepath.Join(root, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Load(child, nil, nil)
	wantErr(t, err, fmt.Sprintf("recipe %s: base %s: not a regular file (line 1)", child, filepath.Join(root, "lib")))
	writeFile(t, child, "name: c\n\nbase: lib/nope.yaml\n")
	// Deeper in the chain, the error names the file that names the base.
	_, err = Load(filepath.Join(root, "mid.yaml"), nil, nil)
	wantErr(t, err, fmt.Sprintf("recipe %s (base of %s): base %s", child, filepath.Join(root, "mid.yaml"), filepath.Join(root, "lib/nope.yaml")), "(line 3)")
}

func TestBaseFileProblemsNameTheFile(t *testing.T) {
	files := map[string]string{
		"base.yaml":                  "train:\n  data: [qa/nq.jsonl]\nhindsight:\n  gold_anwser: false\n",
		"child.yaml":                 "base: base.yaml\nname: c\n",
		"qa/nq.jsonl":                "{}\n",
		"data/corpus/passages.jsonl": "{}\n",
	}
	root := writeTree(t, files)
	base, child := filepath.Join(root, "base.yaml"), filepath.Join(root, "child.yaml")
	_, err := Load(child, nil, nil)
	wantErr(t, err, fmt.Sprintf(`recipe %s (base of %s): unknown key "hindsight.gold_anwser" (line 4)`, base, child))

	cases := []struct{ base, want string }{
		{"train:\n  data: [qa/nq.jsonl]\n  steps: many\n", `train.steps: expected int, got "many" (line 3)`},
		{"train: 5\n", `train: expected map, got 5 (line 1)`},
		{"base: [a.yaml]\n", `base: expected string, got a list (line 1)`},
		{"name: x\nbase: \"\"\n", `base: must name a recipe file (line 2)`},
		{"base: a.yaml\nBase: b.yaml\n", `base: given more than once (line 2)`},
		{"- a\n", "line 1: want a map of keys at the top level"},
	}
	for _, c := range cases {
		writeFile(t, base, c.base)
		_, err := Load(child, nil, nil)
		wantErr(t, err, fmt.Sprintf("recipe %s (base of %s): %s", base, child, c.want))
	}

	// The loaded file's own problems name it alone, with its lines.
	writeFile(t, base, "train:\n  data: [qa/nq.jsonl]\n")
	writeFile(t, child, "base: base.yaml\nname: c\ntrain:\n  stepz: 3\n")
	_, err = Load(child, nil, nil)
	wantErr(t, err, fmt.Sprintf(`recipe %s: unknown key "train.stepz" (line 4)`, child))
	if strings.Contains(err.Error(), "base of") {
		t.Errorf("error %q blames a base", err)
	}
	// Validation problems name the loaded file.
	writeFile(t, child, "base: base.yaml\nname: c\ntrain:\n  group_size: 1\n")
	_, err = Load(child, nil, nil)
	wantErr(t, err, fmt.Sprintf("recipe %s: train.group_size: must be at least 2, got 1", child))
}

func TestBaseChainLimit(t *testing.T) {
	// MaxChain files load; one more is an error naming the chain.
	files := map[string]string{"qa/nq.jsonl": "{}\n", "data/corpus/passages.jsonl": "{}\n", "r0.yaml": minimal}
	for i := 1; i <= MaxChain; i++ {
		files[fmt.Sprintf("r%d.yaml", i)] = fmt.Sprintf("base: r%d.yaml\nseed: %d\n", i-1, i)
	}
	root := writeTree(t, files)
	r, chain, err := LoadChain(filepath.Join(root, fmt.Sprintf("r%d.yaml", MaxChain-1)), nil, nil)
	if err != nil {
		t.Fatalf("a chain of %d files: %v", MaxChain, err)
	}
	if len(chain) != MaxChain || r.Seed != int64(MaxChain-1) {
		t.Errorf("chain of %d files, seed %d; want %d and %d", len(chain), r.Seed, MaxChain, MaxChain-1)
	}
	top := filepath.Join(root, fmt.Sprintf("r%d.yaml", MaxChain))
	_, err = Load(top, nil, nil)
	wantErr(t, err, fmt.Sprintf("more than %d files in the chain %s -> ", MaxChain, top), filepath.Join(root, "r0.yaml")+" (line 1)")
}

func TestBaseFlattenedYAML(t *testing.T) {
	root := writeTree(t, chainTree)
	r := mustLoad(t, filepath.Join(root, "child.yaml"), nil, nil)
	red := r.Redacted()
	y, err := red.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(y), "\n") {
		if strings.HasPrefix(line, "base:") {
			t.Errorf("the resolved recipe has a base key:\n%s", y)
		}
	}
	// The flat form loads again from anywhere, alone, to the same recipe.
	saved := filepath.Join(t.TempDir(), "saved.yaml")
	if err := os.WriteFile(saved, y, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	again, files, err := LoadChain(saved, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, r) || len(files) != 1 {
		t.Errorf("saved recipe loads to\n%+v (files %q)\nwant\n%+v", again, files, r)
	}
}
