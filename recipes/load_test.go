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

// fixture is a recipe directory holding the default corpus path and two
// question files.
type fixture struct {
	dir    string // the recipe's directory
	recipe string // recipe.yaml in dir
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{"data/corpus/passages.jsonl", "qa/nq.jsonl", "qa/hotpotqa.jsonl"} {
		writeFile(t, filepath.Join(dir, p), "{}\n")
	}
	return fixture{dir: dir, recipe: filepath.Join(dir, "recipe.yaml")}
}

// write writes the recipe file and returns its path.
func (f fixture) write(t *testing.T, body string) string {
	t.Helper()
	writeFile(t, f.recipe, body)
	return f.recipe
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

const minimal = "train:\n  data: [qa/nq.jsonl]\n"

func mustLoad(t *testing.T, path string, sets, environ []string) *Recipe {
	t.Helper()
	r, err := Load(path, sets, environ)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return r
}

// wantErr fails unless err's text contains every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func TestDefaultsValidWithDataFiles(t *testing.T) {
	f := newFixture(t)
	got := mustLoad(t, f.write(t, minimal), nil, nil)

	want := Defaults()
	want.Train.Data = []string{filepath.Join(f.dir, "qa/nq.jsonl")}
	want.Retriever.Corpus = filepath.Join(f.dir, "data/corpus/passages.jsonl")
	want.Output.Dir = filepath.Join(f.dir, "runs/hindsearch")
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("Load(minimal) =\n%+v\nwant\n%+v", *got, want)
	}

	d := Defaults()
	d.Train.Data = []string{filepath.Join(f.dir, "qa/nq.jsonl")}
	d.Retriever.Corpus = filepath.Join(f.dir, "data/corpus/passages.jsonl")
	if err := d.Validate(); err != nil {
		t.Errorf("Defaults with data files: Validate() = %v", err)
	}
}

func TestEmptyFileAndNullsKeepDefaults(t *testing.T) {
	f := newFixture(t)
	r := mustLoad(t, f.write(t, "train:\n  data: [qa/nq.jsonl]\n  steps: ~\nhindsight:\n"), nil, nil)
	if r.Train.Steps != 100 || !r.Hindsight.Enabled || r.Train.BatchSize != 512 {
		t.Errorf("null values: steps=%d enabled=%v batch=%d, want the defaults", r.Train.Steps, r.Hindsight.Enabled, r.Train.BatchSize)
	}
	_, err := Load(f.write(t, ""), nil, nil)
	wantErr(t, err, "train.data: must list at least one file")
}

func TestPrecedenceFileEnvSet(t *testing.T) {
	f := newFixture(t)
	path := f.write(t, minimal+"  steps: 5\n  batch_size: 8\n  group_size: 3\nhindsight:\n  gold_answer: true\n  coef: 0.5\n")
	environ := []string{
		"HOME=/nowhere",
		"ORCHESTRA=1", // not ORCH_
		"ORCH_TRAIN_STEPS=6",
		"ORCH_TRAIN_BATCH_SIZE=9",
		"ORCH_HINDSIGHT_GOLD_ANSWER=false",
	}
	r := mustLoad(t, path, []string{"train.steps=7", "Hindsight.Coef=0.25"}, environ)
	if r.Train.Steps != 7 {
		t.Errorf("train.steps = %d, want 7 (set beats env beats file)", r.Train.Steps)
	}
	if r.Train.BatchSize != 9 {
		t.Errorf("train.batch_size = %d, want 9 (env beats file)", r.Train.BatchSize)
	}
	if r.Train.GroupSize != 3 {
		t.Errorf("train.group_size = %d, want 3 (file beats default)", r.Train.GroupSize)
	}
	if r.Hindsight.GoldAnswer {
		t.Error("hindsight.gold_answer = true, want false from ORCH_HINDSIGHT_GOLD_ANSWER")
	}
	if r.Hindsight.Coef != 0.25 {
		t.Errorf("hindsight.coef = %g, want 0.25 (keys are case-insensitive)", r.Hindsight.Coef)
	}

	// Later sets win over earlier ones.
	r = mustLoad(t, path, []string{"train.steps=7", "train.steps=8"}, nil)
	if r.Train.Steps != 8 {
		t.Errorf("train.steps = %d, want 8 from the last set", r.Train.Steps)
	}
}

func TestListByComma(t *testing.T) {
	f := newFixture(t)
	path := f.write(t, minimal+"policy:\n  urls: [embedded]\n")
	r := mustLoad(t, path, []string{"policy.urls=http://a:8000, http://b:8000,"}, nil)
	if want := []string{"http://a:8000", "http://b:8000"}; !reflect.DeepEqual(r.Policy.URLs, want) {
		t.Errorf("--set policy.urls: got %q, want %q", r.Policy.URLs, want)
	}
	r = mustLoad(t, path, nil, []string{"ORCH_POLICY_URLS=http://c:1,https://d"})
	if want := []string{"http://c:1", "https://d"}; !reflect.DeepEqual(r.Policy.URLs, want) {
		t.Errorf("ORCH_POLICY_URLS: got %q, want %q", r.Policy.URLs, want)
	}
	_, err := Load(path, []string{"policy.urls="}, nil)
	wantErr(t, err, "policy.urls: must list at least one URL")
}

func TestMapEntries(t *testing.T) {
	f := newFixture(t)
	cwd := t.TempDir()
	writeFile(t, filepath.Join(cwd, "local/nq.jsonl"), "{}\n")
	writeFile(t, filepath.Join(cwd, "local/bamboogle.jsonl"), "{}\n")
	t.Chdir(cwd)

	path := f.write(t, minimal+"eval:\n  datasets:\n    HotpotQA: qa/hotpotqa.jsonl\n    musique: qa/nq.jsonl\n")
	r := mustLoad(t, path,
		[]string{"eval.datasets.nq=local/nq.jsonl", "eval.datasets.musique="},
		[]string{"ORCH_EVAL_DATASETS_BAMBOOGLE=local/bamboogle.jsonl"})
	want := map[string]string{
		"hotpotqa":  filepath.Join(f.dir, "qa/hotpotqa.jsonl"),
		"nq":        filepath.Join(cwd, "local/nq.jsonl"),
		"bamboogle": filepath.Join(cwd, "local/bamboogle.jsonl"),
	}
	if !reflect.DeepEqual(r.Eval.Datasets, want) {
		t.Errorf("eval.datasets = %v, want %v", r.Eval.Datasets, want)
	}

	_, err := Load(path, []string{"eval.datasets=x"}, nil)
	wantErr(t, err, "--set eval.datasets=x: eval.datasets is a map: set one entry as eval.datasets.NAME=VALUE")
	_, err = Load(path, []string{"eval.datasets.a.b=x"}, nil)
	wantErr(t, err, `entry name "a.b" contains a dot`)
}

func TestPathResolution(t *testing.T) {
	f := newFixture(t)
	cwd := t.TempDir()
	writeFile(t, filepath.Join(cwd, "mine.jsonl"), "{}\n")
	t.Chdir(cwd)

	path := f.write(t, minimal+"name: exp1\npolicy:\n  urls: [http://gpu:8000]\n  tokenizer: tok/tokenizer.json\nretriever:\n  index_dir: cache\nsync:\n  dir: /abs/sync/../sync\n")
	writeFile(t, filepath.Join(f.dir, "tok/tokenizer.json"), "{}")
	r := mustLoad(t, path, []string{"trainer.checkpoints_dir=ckpt"}, nil)
	checks := []struct{ key, got, want string }{
		{"policy.tokenizer", r.Policy.Tokenizer, filepath.Join(f.dir, "tok/tokenizer.json")},
		{"train.data[0]", r.Train.Data[0], filepath.Join(f.dir, "qa/nq.jsonl")},
		{"retriever.corpus", r.Retriever.Corpus, filepath.Join(f.dir, "data/corpus/passages.jsonl")},
		{"retriever.index_dir", r.Retriever.IndexDir, filepath.Join(f.dir, "cache")},
		{"trainer.checkpoints_dir", r.Trainer.CheckpointsDir, filepath.Join(cwd, "ckpt")},
		{"sync.dir", r.Sync.Dir, "/abs/sync"},
		{"output.dir", r.Output.Dir, filepath.Join(f.dir, "runs/exp1")},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.key, c.got, c.want)
		}
	}

	r = mustLoad(t, path, []string{"train.data=mine.jsonl", "output.dir=out/{name}", "name=exp2"}, nil)
	if want := filepath.Join(cwd, "mine.jsonl"); r.Train.Data[0] != want {
		t.Errorf("--set train.data: got %q, want %q (relative to the working directory)", r.Train.Data[0], want)
	}
	if want := filepath.Join(cwd, "out/exp2"); r.Output.Dir != want {
		t.Errorf("--set output.dir: got %q, want %q", r.Output.Dir, want)
	}
	// policy.tokenizer's names are not paths, in a file or in --set.
	for _, name := range []string{TokenizerAuto, TokenizerSim} {
		p := f.write(t, minimal+"policy:\n  tokenizer: "+name+"\n")
		if r := mustLoad(t, p, nil, nil); r.Policy.Tokenizer != name {
			t.Errorf("policy.tokenizer: %s in the file became %q", name, r.Policy.Tokenizer)
		}
		if r := mustLoad(t, path, []string{"policy.tokenizer=" + name}, nil); r.Policy.Tokenizer != name {
			t.Errorf("--set policy.tokenizer=%s became %q", name, r.Policy.Tokenizer)
		}
	}
}

func TestUnknownKeyInFile(t *testing.T) {
	f := newFixture(t)
	path := f.write(t, minimal+"hindsight:\n  gold_anwser: false\n")
	_, err := Load(path, nil, nil)
	wantErr(t, err, `recipe `+path+`: unknown key "hindsight.gold_anwser" (line 4)`)

	_, err = Load(f.write(t, minimal+"trian: {steps: 3}\nfoo: 1\n"), nil, nil)
	wantErr(t, err, "2 problems", `unknown key "trian" (line 3)`, `unknown key "foo" (line 4)`)
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 2 || ps[0].Key != "trian" || ps[1].Key != "foo" {
		t.Errorf("Problems = %+v, want trian then foo", ps)
	}
}

func TestUnknownOrMalformedOverride(t *testing.T) {
	f := newFixture(t)
	path := f.write(t, minimal)
	_, err := Load(path, []string{"trani.steps=3"}, nil)
	if err == nil || err.Error() != `--set trani.steps=3: unknown recipe key "trani.steps"` {
		t.Errorf("unknown --set key: got %v", err)
	}
	_, err = Load(path, []string{"train"}, nil)
	wantErr(t, err, "--set train: want key=value")
	_, err = Load(path, []string{"train=3"}, nil)
	wantErr(t, err, `unknown recipe key "train"`)
	_, err = Load(path, nil, []string{"ORCH_TRANI_STEPS=3"})
	wantErr(t, err, "environment ORCH_TRANI_STEPS: no recipe key of that name")
}

func TestWrongType(t *testing.T) {
	f := newFixture(t)
	cases := []struct{ body, want string }{
		{minimal + "  steps: three\n", `recipe ` + f.recipe + `: train.steps: expected int, got "three" (line 3)`},
		{minimal + "  steps: 3.5\n", `train.steps: expected int, got 3.5`},
		{minimal + "hindsight:\n  enabled: yes\n", `hindsight.enabled: expected bool, got "yes"`},
		{minimal + "hindsight:\n  coef: high\n", `hindsight.coef: expected number, got "high"`},
		{minimal + "policy:\n  urls: embedded\n", `policy.urls: expected list of strings, got "embedded"`},
		{minimal + "eval:\n  datasets:\n    nq: [a]\n", `eval.datasets.nq: expected string, got a list`},
		{minimal + "eval:\n  datasets: x\n", `eval.datasets: expected map of strings, got "x"`},
		{minimal + "name: {a: 1}\n", `name: expected string, got a map`},
		{"train: 5\n", `train: expected map, got 5 (line 1)`},
		{"train:\n  data:\n    - qa/nq.jsonl\n    - 5\n", `train.data[1]: expected string, got 5 (line 4)`},
	}
	for _, c := range cases {
		_, err := Load(f.write(t, c.body), nil, nil)
		wantErr(t, err, c.want)
	}

	// Overrides are converted by key type before decoding.
	_, err := Load(f.write(t, minimal), []string{"train.steps=three"}, nil)
	wantErr(t, err, `--set train.steps=three: train.steps: expected int, got "three"`)
	_, err = Load(f.recipe, nil, []string{"ORCH_HINDSIGHT_ENABLED=maybe"})
	wantErr(t, err, `environment ORCH_HINDSIGHT_ENABLED: hindsight.enabled: expected bool, got "maybe"`)

	// Ints given as whole numbers, and ints for numbers, are fine.
	r := mustLoad(t, f.write(t, minimal+"  steps: 3.0\n  temperature: 1\n"), nil, nil)
	if r.Train.Steps != 3 || r.Train.Temperature != 1 {
		t.Errorf("steps=%d temperature=%g, want 3 and 1", r.Train.Steps, r.Train.Temperature)
	}
}

func TestMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path, nil, nil)
	wantErr(t, err, "recipe "+path+": no such file")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(%v, fs.ErrNotExist) = false", err)
	}
	if _, err := Load("", nil, nil); err == nil {
		t.Error("Load(\"\") succeeded")
	}
}

func TestYAMLSyntaxError(t *testing.T) {
	f := newFixture(t)
	_, err := Load(f.write(t, "train:\n  steps: 3\n bad: [\n"), nil, nil)
	wantErr(t, err, "recipe "+f.recipe+": line 2: did not find expected key")
	_, err = Load(f.write(t, "train:\n  steps: 3\n  steps: 4\n"), nil, nil)
	wantErr(t, err, "recipe "+f.recipe+": line 3:", `"steps" already defined`)
	_, err = Load(f.write(t, "- a\n- b\n"), nil, nil)
	wantErr(t, err, "recipe "+f.recipe+": line 1: want a map of keys at the top level")
}

func TestKeys(t *testing.T) {
	keys := Keys()
	if keys[0] != "name" || keys[len(keys)-1] != "variants" {
		t.Errorf("Keys() runs %q..%q, want name..variants", keys[0], keys[len(keys)-1])
	}
	seen := map[string]string{}
	for _, k := range keys {
		env := EnvName(k)
		if other, dup := seen[env]; dup {
			t.Errorf("keys %q and %q share %s", k, other, env)
		}
		seen[env] = k
	}
	for _, k := range []string{"hindsight.gold_answer", "eval.datasets", "train.data", "http.retry_wait_max_ms"} {
		if _, ok := seen[EnvName(k)]; !ok {
			t.Errorf("Keys() lacks %q", k)
		}
	}
	if got := EnvName("hindsight.gold_answer"); got != "ORCH_HINDSIGHT_GOLD_ANSWER" {
		t.Errorf("EnvName = %q", got)
	}

	// Every key can be set from the environment with its default's text.
	f := newFixture(t)
	path := f.write(t, minimal)
	d := Defaults()
	var environ []string
	for _, fd := range schema() {
		v := reflect.ValueOf(d).FieldByIndex(fd.index)
		var text string
		switch v.Kind() {
		case reflect.Map:
			continue
		case reflect.Slice:
			var parts []string
			for i := range v.Len() {
				parts = append(parts, fmt.Sprint(v.Index(i).Interface()))
			}
			text = strings.Join(parts, ",")
		default:
			text = fmt.Sprint(v.Interface())
		}
		if fd.key == "train.data" {
			text = filepath.Join(f.dir, "qa/nq.jsonl")
		}
		if fd.key == "retriever.corpus" {
			text = filepath.Join(f.dir, "data/corpus/passages.jsonl")
		}
		environ = append(environ, EnvName(fd.key)+"="+text)
	}
	r := mustLoad(t, path, nil, environ)
	want := Defaults()
	want.Train.Data = []string{filepath.Join(f.dir, "qa/nq.jsonl")}
	want.Retriever.Corpus = filepath.Join(f.dir, "data/corpus/passages.jsonl")
	cwd, _ := os.Getwd()
	want.Output.Dir = filepath.Join(cwd, "runs/hindsearch")
	if !reflect.DeepEqual(*r, want) {
		t.Errorf("all keys from env =\n%+v\nwant\n%+v", *r, want)
	}
}
