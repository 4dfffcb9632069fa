package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// writeRun writes a made-up run directory: steps whose mean reward goes
// from r0 to r1 linearly, their gold-retrieved rate equal to the reward,
// and evaluations at step 0 and the last step.
func writeRun(t *testing.T, dir string, steps int, r0, r1, em0, em1 float64, n int) {
	t.Helper()
	d := &results.RunDir{Path: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= steps; s++ {
		r := r0 + (r1-r0)*float64(s-1)/float64(steps-1)
		if err := d.AppendJSONL("steps.jsonl", results.StepRecord{Step: s, RewardMean: r, Critiques: 2, OPDTokens: 3, WallSeconds: 10,
			Health: &results.Health{GoldRetrievedRate: &r}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []results.EvalRecord{
		{Step: 0, Strategy: "search", Dataset: "units", N: n, EM: em0},
		{Step: steps, Strategy: "search", Dataset: "units", N: n, EM: em1},
	} {
		if err := d.AppendJSONL("eval.jsonl", e); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckPassesArmsThatLearned(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "grpo"), filepath.Join(root, "hindsight")
	writeRun(t, a, 10, 0.1, 0.9, 0.05, 0.6, 200)
	writeRun(t, b, 10, 0.1, 0.7, 0.05, 0.30, 200)
	var out bytes.Buffer
	if err := runCheck(&out, []string{a, b}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"SIMULATED", "grpo", "hindsight", "+55.0", "+25.0", "every arm learned"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
	// Reward first 5 of 0.1..0.9 over 10 steps: mean of 0.1+k*0.0889, k=0..4.
	if !strings.Contains(out.String(), "0.278") || !strings.Contains(out.String(), "0.722") {
		t.Errorf("window means wrong:\n%s", out.String())
	}
}

func TestCheckFailsEachMargin(t *testing.T) {
	for name, c := range map[string]struct {
		r1, em1 float64
		n       int
		want    string
	}{
		"em":        {0.9, 0.2, 200, "held-out EM rose 15.0 points"},
		"reward":    {0.3, 0.6, 200, "sampled reward rose 0.111"},
		"questions": {0.9, 0.6, 100, "evaluated on 100 and 100 questions"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "arm")
			writeRun(t, dir, 10, 0.1, c.r1, 0.05, c.em1, c.n)
			var out bytes.Buffer
			err := runCheck(&out, []string{dir})
			if err == nil || !strings.Contains(out.String(), c.want) {
				t.Fatalf("err %v, want a failure saying %q:\n%s", err, c.want, out.String())
			}
		})
	}
}

func TestCheckNeedsTwoWindows(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "arm")
	writeRun(t, dir, 6, 0.1, 0.9, 0.05, 0.6, 200)
	if err := runCheck(&bytes.Buffer{}, []string{dir}); err == nil || !strings.Contains(err.Error(), "at least 10") {
		t.Fatalf("err %v, want the two windows named", err)
	}
}

// TestTask writes a small task and holds it to its design: unique names
// and values (words.txt lists them all), the asked unit listed, questions on disjoint units, a lesson
// whose searches copy a listed unit (or the hint's) and whose answers copy
// a value of the passage shown, hints quoting a listed unit that is the
// asked one only by chance.
func TestTask(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir, 7, sizes{lessonUnits: 500, rlUnits: 300, evalUnits: 200, lesson: 2000, checks: 50}); err != nil {
		t.Fatal(err)
	}
	corpus, err := dataset.LoadCorpus(filepath.Join(dir, "units-corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(corpus) != 1000 {
		t.Fatalf("%d passages", len(corpus))
	}
	passageRE := regexp.MustCompile(`^"Unit ([A-Z]{5})"\nUnit ([A-Z]{5}) is a storage unit with code ([A-Z]{5}), pin ([A-Z]{5}) and lock ([A-Z]{5})\.$`)
	seen := map[string]bool{}
	unitOf := map[string]string{} // a value -> its unit's title
	for _, p := range corpus {
		m := passageRE.FindStringSubmatch(p)
		if m == nil || m[1] != m[2] {
			t.Fatalf("passage %q", p)
		}
		for i, v := range append([]string{m[1]}, m[3:]...) {
			if seen[v] {
				t.Fatalf("%s repeated", v)
			}
			seen[v] = true
			if i > 0 {
				unitOf[v] = "Unit " + m[1]
			}
		}
	}
	words, err := os.ReadFile(filepath.Join(dir, "words.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if ws := strings.Fields(string(words)); len(ws) != len(seen) {
		t.Fatalf("words.txt has %d words, the corpus %d names and values", len(ws), len(seen))
	} else {
		for _, w := range ws {
			if !seen[w] {
				t.Fatalf("words.txt's %s is no name or value of the corpus", w)
			}
		}
	}
	train, err := dataset.Load(filepath.Join(dir, "units-train.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	eval, err := dataset.Load(filepath.Join(dir, "units-eval.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(train) != 300 || len(eval) != 200 {
		t.Fatalf("%d RL and %d held-out questions", len(train), len(eval))
	}
	askedRE := regexp.MustCompile(`^Units ([A-Z]{5}), ([A-Z]{5}), ([A-Z]{5}) and ([A-Z]{5}) share a floor\. What is the (code|pin|lock) of unit ([A-Z]{5})\?$`)
	unitsOf := func(qs []dataset.Question) map[string]bool {
		us := map[string]bool{}
		for _, q := range qs {
			m := askedRE.FindStringSubmatch(q.Question)
			if m == nil {
				t.Fatalf("question %q", q.Question)
			}
			listed := false
			for i, id := range m[1:5] {
				us[id] = true
				listed = listed || id == m[6]
				for _, other := range m[1+i+1 : 5] {
					if id == other {
						t.Fatalf("question %q lists %s twice", q.Question, id)
					}
				}
			}
			if !listed || unitOf[q.Golds[0]] != "Unit "+m[6] {
				t.Fatalf("question %q, gold %v: the asked unit is not listed or the gold is not its value", q.Question, q.Golds)
			}
		}
		return us
	}
	tu, eu := unitsOf(train), unitsOf(eval)
	for _, q := range append(train, eval...) {
		if m := askedRE.FindStringSubmatch(q.Question); m[5] != "pin" {
			t.Fatalf("question %q asks the %s; RL and held-out questions ask the pin", q.Question, m[5])
		}
	}
	for u := range eu {
		if tu[u] {
			t.Fatalf("unit %s is in RL and held-out questions", u)
		}
	}

	f, err := os.Open(filepath.Join(dir, "lesson.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	hinted, hintAsked, plainAsked, plain := 0, 0, 0, 0
	valuesRE := regexp.MustCompile(`with code ([A-Z]{5}), pin ([A-Z]{5}) and lock ([A-Z]{5})\.</information>`)
	quoteRE := regexp.MustCompile(`Hint: [^\n]*"(Unit [A-Z]{5})"`)
	for sc.Scan() {
		var ex struct {
			Kind     string   `json:"kind"`
			Segments [][2]any `json:"segments"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
			t.Fatal(err)
		}
		prompt, turn1, info, turn2 := ex.Segments[0][0].(string), ex.Segments[1][0].(string), ex.Segments[2][0].(string), ex.Segments[3][0].(string)
		m := askedRE.FindStringSubmatch(strings.TrimSpace(prompt[strings.Index(prompt, "Question: ")+10 : strings.Index(prompt, "<|im_end|>")]))
		if m == nil {
			t.Fatalf("lesson prompt %q", prompt)
		}
		if _, q := format.ParseAction(turn1); eu[strings.TrimPrefix(q, "Unit ")] || tu[strings.TrimPrefix(q, "Unit ")] {
			t.Fatalf("the lesson searches %s, an RL or held-out unit", q)
		}
		kind, value := format.ParseAction(turn2)
		if vm := valuesRE.FindStringSubmatch(info); kind != "answer" || vm == nil || !slices.Contains(vm[1:], value) {
			t.Fatalf("the lesson's answer %q is not a value of the passage shown %q", turn2, info)
		}
		_, query := format.ParseAction(turn1)
		if ex.Kind == "hinted" {
			hinted++
			qm := quoteRE.FindStringSubmatch(prompt)
			if qm == nil {
				t.Fatalf("hinted prompt without a quoted unit: %q", prompt)
			}
			if qm[1] == "Unit "+m[6] {
				hintAsked++
			}
			continue
		}
		plain++
		if query == "Unit "+m[6] {
			plainAsked++
		}
	}
	// The hint quotes a listed unit uniformly (1/4 the asked one) and a
	// plain search is the asked unit 0.8/4 of the time: nothing of the rule.
	if h := float64(hintAsked) / float64(hinted); hinted < 400 || h < 0.18 || h > 0.32 {
		t.Errorf("%d hinted examples, %.2f quote the asked unit; want about 0.25", hinted, h)
	}
	if p := float64(plainAsked) / float64(plain); p < 0.15 || p > 0.25 {
		t.Errorf("%.2f of plain examples search the asked unit; want about 0.2", p)
	}
}

// TestRecipeLoads holds sim/real/learn.yaml valid on a task written here
// (run.sh writes it into runs/real-learn/task, the recipe's paths), and
// its study arms to differ only in the hindsight keys.
func TestRecipeLoads(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir, 1, sizes{lessonUnits: 100, rlUnits: 60, evalUnits: 40, lesson: 10, checks: 5}); err != nil {
		t.Fatal(err)
	}
	sets := []string{"policy.tokenizer=qwen3", "retriever.corpus=" + filepath.Join(dir, "units-corpus.jsonl"),
		"train.data=" + filepath.Join(dir, "units-train.jsonl"), "eval.datasets.units=" + filepath.Join(dir, "units-eval.jsonl")}
	r, err := recipes.Load("../learn.yaml", sets, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Judge.URL != recipes.Embedded || r.Policy.Server != "vllm" || r.Trainer.URL == recipes.Embedded {
		t.Errorf("judge %s, policy %s, trainer %s: want the embedded judge beside a real policy and trainer", r.Judge.URL, r.Policy.Server, r.Trainer.URL)
	}
	if r.Rollout.MaxTurns != 1 || !r.Rollout.FinalAnswerRound || r.Retriever.TopK != 1 {
		t.Errorf("rollout %+v, topk %d: want one search, then the answer, one passage", r.Rollout, r.Retriever.TopK)
	}
	for name, sw := range r.Variants {
		for _, kv := range sw {
			if !strings.HasPrefix(kv, "hindsight.") {
				t.Errorf("variant %s sets %s: the arms must differ only in hindsight keys", name, kv)
			}
		}
	}
}
