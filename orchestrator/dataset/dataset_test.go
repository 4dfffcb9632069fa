package dataset

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/recipes"
)

func writeDataFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadQuestions(t *testing.T) {
	p := writeDataFile(t, "nq.jsonl", `{"id": "train_0", "question": "who wrote hamlet", "golden_answers": ["Shakespeare", " ", "William Shakespeare"]}

{"id": 17, "question": "capital of france?", "golden_answers": ["Paris"], "dataset": "custom"}
{"question": "no id", "golden_answers": ["x"], "extra": {"ignored": true}}
{"id": null, "question": "null id", "golden_answers": ["y"]}
{"id": "a\"b", "question": "escaped id", "golden_answers": ["z"]}
`)
	qs, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Question{
		{ID: "train_0", Question: "who wrote hamlet", Golds: []string{"Shakespeare", "William Shakespeare"}, Dataset: "nq"},
		{ID: "17", Question: "capital of france?", Golds: []string{"Paris"}, Dataset: "custom"},
		{ID: "nq-4", Question: "no id", Golds: []string{"x"}, Dataset: "nq"},
		{ID: "nq-5", Question: "null id", Golds: []string{"y"}, Dataset: "nq"},
		{ID: `a"b`, Question: "escaped id", Golds: []string{"z"}, Dataset: "nq"},
	}
	if !reflect.DeepEqual(qs, want) {
		t.Errorf("Load:\n got %+v\nwant %+v", qs, want)
	}
}

func TestLoadQuestionsShippedData(t *testing.T) {
	ents, err := filepath.Glob("../../recipes/data/qa/*.jsonl")
	if err != nil || len(ents) == 0 {
		t.Skipf("no shipped data: %v", err)
	}
	for _, f := range ents {
		qs, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		ids := map[string]bool{}
		for _, q := range qs {
			if ids[q.ID] {
				t.Errorf("%s: duplicate id %q", f, q.ID)
			}
			ids[q.ID] = true
		}
	}
}

func TestLoadQuestionsErrors(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"not json", "{\"question\": \"q\", \"golden_answers\": [\"a\"]}\nnot json\n", ":2: not a JSON object"},
		{"array", "[1, 2]\n", ":1: not a JSON object"},
		{"truncated", "{\"question\": \"q\", \"golden_answers\": [\"a\"]}\n\n{\"question\": \"q\"\n", ":3: not a JSON object"},
		{"no question", "{\"id\": \"1\", \"golden_answers\": [\"a\"]}\n", `:1: no "question"`},
		{"blank question", "{\"question\": \"  \", \"golden_answers\": [\"a\"]}\n", `:1: no "question"`},
		{"null question", "{\"question\": null, \"golden_answers\": [\"a\"]}\n", `:1: no "question"`},
		{"no golds", "{\"question\": \"q\", \"golden_answers\": [\"a\"]}\n{\"question\": \"q\"}\n", `:2: no gold answer ("golden_answers", or "answer")`},
		{"empty golds", "{\"question\": \"q\", \"golden_answers\": []}\n", `:1: no gold answer`},
		{"blank golds", "{\"question\": \"q\", \"golden_answers\": [\"\", \" \"]}\n", `:1: no gold answer`},
		{"golds not strings", "{\"question\": \"q\", \"golden_answers\": [1]}\n", ":1: not a JSON object"},
		{"answer a number", "{\"question\": \"q\", \"answer\": 5}\n", `:1: "answer" is neither a string nor a list of strings`},
		{"answer empty", "{\"question\": \"q\", \"answer\": \"\"}\n", `:1: no gold answer`},
		{"empty file", "", ": no questions"},
		{"only blank lines", "\n  \n\n", ": no questions"},
	}
	for _, c := range cases {
		p := writeDataFile(t, "d.jsonl", c.body)
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), p+c.want) {
			t.Errorf("%s: Load error %v, want it to contain %q", c.name, err, p+c.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	// A line past the scanner's limit names its line.
	p := writeDataFile(t, "big.jsonl", "{\"question\": \"q\", \"golden_answers\": [\"a\"]}\n{\"question\": \""+strings.Repeat("x", 17<<20)+"\"}\n")
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Errorf("over-long line: %v", err)
	}
}

func TestLoadCorpus(t *testing.T) {
	p := writeDataFile(t, "c.jsonl", "{\"id\": \"1\", \"contents\": \"\\\"Paris\\\"\\nCapital of France.\"}\n\n{\"id\": \"2\", \"contents\": \"\"}\n")
	got, err := LoadCorpus(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"\"Paris\"\nCapital of France.", ""}; !reflect.DeepEqual(got, want) {
		t.Errorf("LoadCorpus = %q, want %q", got, want)
	}

	cases := []struct{ body, want string }{
		{"{\"contents\": \"a\"}\n{bad\n", ":2: not a JSON object"},
		{"{\"id\": \"1\"}\n", `:1: no "contents"`},
		{"{\"contents\": null}\n", `:1: no "contents"`},
		{"{\"contents\": 5}\n", ":1: not a JSON object"},
	}
	for _, c := range cases {
		p := writeDataFile(t, "c.jsonl", c.body)
		_, err := LoadCorpus(p)
		if err == nil || !strings.Contains(err.Error(), p+c.want) {
			t.Errorf("LoadCorpus(%q) error %v, want %q", c.body, err, p+c.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "none.jsonl")
	if _, err := LoadCorpus(missing); err == nil || !strings.HasPrefix(err.Error(), "corpus: ") || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing corpus: %v", err)
	}
	if got, err := LoadCorpus(writeDataFile(t, "e.jsonl", "")); err != nil || len(got) != 0 {
		t.Errorf("empty corpus = %v, %v", got, err)
	}
}

func TestSimAnswers(t *testing.T) {
	train := writeDataFile(t, "train.jsonl", `{"id": "1", "question": "who wrote hamlet", "golden_answers": ["Shakespeare"]}
{"id": "2", "question": "capital of france?", "golden_answers": ["Paris"]}
`)
	ev := writeDataFile(t, "ev.jsonl", `{"id": "3", "question": "who wrote hamlet", "golden_answers": ["William Shakespeare", "Shakespeare"]}
`)
	r := &recipes.Recipe{}
	r.Train.Data = []string{train}
	r.Eval.Datasets = map[string]string{"ev": ev}
	got, err := Answers(r)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"who wrote hamlet": {"Shakespeare", "William Shakespeare"}, "capital of france?": {"Paris"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Answers = %v, want %v", got, want)
	}
	r.Eval.Datasets["broken"] = filepath.Join(t.TempDir(), "missing.jsonl")
	if _, err := Answers(r); err == nil || !strings.HasPrefix(err.Error(), "eval.datasets.broken: ") {
		t.Errorf("missing eval file: err %v, want it to name eval.datasets.broken", err)
	}
	r.Train.Data = append(r.Train.Data, "/nonexistent/train.jsonl")
	if _, err := Answers(r); err == nil || !strings.HasPrefix(err.Error(), "train.data[1]: ") {
		t.Errorf("missing train file: err %v, want it to name train.data[1]", err)
	}
}

func TestLoadEvalSetsSizes(t *testing.T) {
	r := &recipes.Recipe{}
	r.Eval.PerDataset = 4
	r.Eval.Sizes = map[string]int{"nq": 0}
	r.Eval.Datasets = map[string]string{"hotpotqa": "../../recipes/data/qa/hotpotqa.jsonl", "nq": "../../recipes/data/qa/nq.jsonl"}
	sets, err := EvalSets(r)
	if err != nil {
		t.Fatal(err)
	}
	all, err := Load(r.Eval.Datasets["nq"])
	if err != nil {
		t.Fatal(err)
	}
	if len(sets["hotpotqa"]) != 4 || len(sets["nq"]) != len(all) {
		t.Errorf("eval sets: hotpotqa %d (want eval.per_dataset 4), nq %d (want the whole file, %d)", len(sets["hotpotqa"]), len(sets["nq"]), len(all))
	}
}

func TestExcludeEvalAndContamination(t *testing.T) {
	train := []Question{{Question: "Who wrote Hamlet?"}, {Question: "where is  Utah"}, {Question: "What is 2+2?"}}
	sets := map[string][]Question{"nq": {{Question: "who wrote hamlet"}, {Question: "Capital of France?"}}, "popqa": {{Question: "Where is Utah?"}}}
	if w := Contamination(train, sets); w != "evaluation questions also in train.data (nq 1/2, popqa 1/1): their EM is inflated by training on them; point train.data at a training split" {
		t.Errorf("contamination = %q", w)
	}
	kept, n := Exclude(train, sets)
	if n != 2 || len(kept) != 1 || kept[0].Question != "What is 2+2?" {
		t.Errorf("excludeEval kept %v, dropped %d", kept, n)
	}
	if w := Contamination(kept, sets); w != "" {
		t.Errorf("contamination after exclusion = %q", w)
	}
}

// eval.subset: first N, a seeded random N (the same every time, in file
// order, another draw per seed), all; the manifest names each question
// by id with the file's sha256, and read back as eval.subset gives the
// very same questions; a manifest of another file is refused.
func TestEvalSubsets(t *testing.T) {
	var lines []string
	for i := 0; i < 40; i++ {
		lines = append(lines, fmt.Sprintf(`{"id": "q%d", "question": "question %d?", "golden_answers": ["a%d"]}`, i, i, i))
	}
	f := writeDataFile(t, "nq.jsonl", strings.Join(lines, "\n")+"\n")
	r := recipes.Defaults()
	r.Eval.Datasets = map[string]string{"nq": f}
	r.Eval.PerDataset = 5
	ids := func(qs []Question) string {
		var s []string
		for _, q := range qs {
			s = append(s, q.ID)
		}
		return strings.Join(s, ",")
	}
	sets, man, err := EvalSetsWithSubset(&r)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(sets["nq"]); got != "q0,q1,q2,q3,q4" || man.Datasets["nq"].How != "first" || man.Datasets["nq"].Total != 40 {
		t.Errorf("first: %s %+v", got, man.Datasets["nq"])
	}
	r.Eval.Subset = recipes.SubsetRandom
	a, _, _ := EvalSetsWithSubset(&r)
	b, man, _ := EvalSetsWithSubset(&r)
	r.Eval.SubsetSeed = 2
	c, _, _ := EvalSetsWithSubset(&r)
	if ids(a["nq"]) != ids(b["nq"]) || ids(a["nq"]) == ids(c["nq"]) || ids(a["nq"]) == "q0,q1,q2,q3,q4" {
		t.Errorf("random: %s, again %s, seed 2 %s", ids(a["nq"]), ids(b["nq"]), ids(c["nq"]))
	}
	path := filepath.Join(t.TempDir(), "eval_subset.json")
	if err := man.Write(path); err != nil {
		t.Fatal(err)
	}
	r.Eval.Subset, r.Eval.PerDataset = path, 0
	back, _, err := EvalSetsWithSubset(&r)
	if err != nil || ids(back["nq"]) != ids(a["nq"]) {
		t.Errorf("from the manifest: %s %v, want %s", ids(back["nq"]), err, ids(a["nq"]))
	}
	r.Eval.Datasets["nq"] = writeDataFile(t, "nq2.jsonl", lines[0]+"\n")
	if _, _, err := EvalSetsWithSubset(&r); err == nil || !strings.Contains(err.Error(), "not the same questions") {
		t.Errorf("another file: %v", err)
	}
	r.Eval.Subset = recipes.SubsetAll
	r.Eval.Datasets["nq"], r.Eval.PerDataset = f, 5
	if all, _, _ := EvalSetsWithSubset(&r); len(all["nq"]) != 40 {
		t.Errorf("all: %d questions", len(all["nq"]))
	}
}

// eval.subset rand1000: ASearcher's file (answer, no ids) names the
// questions; they are found in the dataset's file by normalised text, in
// the file's order, with the dataset file's ids and golds; a question the
// file lacks is refused, naming it. searchr1-test refuses a file of
// another size than the split's.
func TestNamedSubsets(t *testing.T) {
	f := writeDataFile(t, "bamboogle.jsonl", `{"id": "test_0", "question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare", "William Shakespeare"]}
{"id": "test_1", "question": "What is the capital of France?", "golden_answers": ["Paris"]}
{"id": "test_2", "question": "What is the capital of France?", "golden_answers": ["Paris"]}
{"id": "test_3", "question": "How tall is Everest?", "golden_answers": ["8,849 m"]}
`)
	dir := t.TempDir()
	from := filepath.Join(dir, "eval-rand1000", "bamboogle.jsonl")
	if err := os.MkdirAll(filepath.Dir(from), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(body string) {
		if err := os.WriteFile(from, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"question": "how tall is everest", "answer": "8,849 m"}
{"question": "What is the capital of France?", "answer": ["Paris"]}
{"question": "What is the capital of France?", "gt": "Paris"}
`)
	r := recipes.Defaults()
	r.Eval.Datasets = map[string]string{"bamboogle": f}
	r.Eval.Subset = recipes.SubsetRand1000
	r.Eval.SubsetFiles = map[string]string{"bamboogle": from}
	sets, man, err := EvalSetsWithSubset(&r)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range sets["bamboogle"] {
		got = append(got, q.ID)
	}
	s := man.Datasets["bamboogle"]
	if strings.Join(got, ",") != "test_3,test_1,test_2" || s.How != "rand1000" || s.From != "eval-rand1000/bamboogle.jsonl" || len(s.FromSHA256) != 64 || s.N != 3 || s.Total != 4 {
		t.Errorf("rand1000: %v %+v", got, s)
	}
	if g := sets["bamboogle"][0].Golds; len(g) != 1 || g[0] != "8,849 m" {
		t.Errorf("golds: %v", g)
	}
	write(`{"question": "Who painted the Mona Lisa?", "answer": "Leonardo"}` + "\n")
	if _, _, err := EvalSetsWithSubset(&r); err == nil || !strings.Contains(err.Error(), `1 of the 1 questions`) || !strings.Contains(err.Error(), "Mona Lisa") {
		t.Errorf("a question not in the file: %v", err)
	}
	r.Eval.Subset = recipes.SubsetSearchR1Test
	if _, _, err := EvalSetsWithSubset(&r); err == nil || !strings.Contains(err.Error(), "holds 4 questions") || !strings.Contains(err.Error(), "are 125") {
		t.Errorf("searchr1-test of a 4-question file: %v", err)
	}
}
