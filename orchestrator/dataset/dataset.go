package dataset

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/recipes"
)

// Question is one benchmark or training question.
type Question struct {
	// ID is the dataset's id of the question.
	ID string `json:"id"`
	// Question is the question text.
	Question string `json:"question"`
	// Golds are the gold answers.
	Golds []string `json:"golden_answers"`
	// Dataset names the file the question came from.
	Dataset string `json:"dataset"`
}

// Load reads a question file, choosing the format by extension: a
// ".parquet" file is read as Search-R1 parquet (see loadSearchR1Parquet),
// anything else as FlashRAG JSONL (see loadJSONL). Errors name the file and
// the line or row.
func Load(path string) ([]Question, error) {
	if strings.EqualFold(filepath.Ext(path), ".parquet") {
		return loadSearchR1Parquet(path)
	}
	return loadJSONL(path)
}

// loadJSONL reads a FlashRAG JSONL file ({"id", "question",
// "golden_answers"} per line), or ASearcher's test files (inclusionAI/
// ASearcher-test-data: the gold answers in "answer", a string or a list,
// or "gt", and no id: ids are the file name and line). Errors name the
// file and line. The dataset name defaults to the file name without
// extension.
func loadJSONL(path string) ([]Question, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	var out []Question
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var raw struct {
			ID       json.RawMessage `json:"id"`
			Question *string         `json:"question"`
			Golds    []string        `json:"golden_answers"`
			Answer   json.RawMessage `json:"answer"`
			GT       json.RawMessage `json:"gt"`
			Dataset  string          `json:"dataset"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, fmt.Errorf("%s:%d: not a JSON object: %w", path, line, err)
		}
		if raw.Question == nil || strings.TrimSpace(*raw.Question) == "" {
			return nil, fmt.Errorf("%s:%d: no \"question\"", path, line)
		}
		if raw.Golds == nil {
			// ASearcher's rows, read as its evaluate.py does: answer,
			// else gt; a string or a list of strings.
			a := raw.Answer
			if len(a) == 0 {
				a = raw.GT
			}
			var one string
			if err := json.Unmarshal(a, &one); err == nil {
				raw.Golds = []string{one}
			} else if len(a) > 0 && json.Unmarshal(a, &raw.Golds) != nil {
				return nil, fmt.Errorf("%s:%d: \"answer\" is neither a string nor a list of strings", path, line)
			}
		}
		var golds []string
		for _, g := range raw.Golds {
			if strings.TrimSpace(g) != "" {
				golds = append(golds, g)
			}
		}
		if len(golds) == 0 {
			return nil, fmt.Errorf("%s:%d: no gold answer (\"golden_answers\", or \"answer\")", path, line)
		}
		var id string // a string id, or the JSON text of another (a number)
		if err := json.Unmarshal(raw.ID, &id); err != nil {
			id = string(raw.ID)
		}
		if id == "" {
			id = fmt.Sprintf("%s-%d", name, line)
		}
		ds := raw.Dataset
		if ds == "" {
			ds = name
		}
		out = append(out, Question{ID: id, Question: *raw.Question, Golds: golds, Dataset: ds})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", path, line+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no questions", path)
	}
	return out, nil
}

// LoadCorpus reads a wiki-18-format JSONL corpus and returns the contents
// strings in file order. Errors name the file and line.
func LoadCorpus(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var p struct {
			Contents *string `json:"contents"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("%s:%d: not a JSON object: %w", path, line, err)
		}
		if p.Contents == nil {
			return nil, fmt.Errorf("%s:%d: no \"contents\"", path, line)
		}
		out = append(out, *p.Contents)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", path, line+1, err)
	}
	return out, nil
}

// Answers collects the gold answers of the recipe's training
// (train.data) and evaluation (eval.datasets) questions, question text to
// gold answers (merged when a question is in several files), for the
// embedded simulator's reading skill (sim.Config.Answers: the simulated
// agent recognises a gold answer in a passage it has read). Errors name
// the recipe key of the file.
func Answers(r *recipes.Recipe) (map[string][]string, error) {
	out := map[string][]string{}
	add := func(key, path string) error {
		qs, err := Load(path)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		for _, q := range qs {
			for _, g := range q.Golds {
				if !slices.Contains(out[q.Question], g) {
					out[q.Question] = append(out[q.Question], g)
				}
			}
		}
		return nil
	}
	for i, f := range r.Train.Data {
		if err := add(fmt.Sprintf("train.data[%d]", i), f); err != nil {
			return nil, err
		}
	}
	names := slices.Sorted(maps.Keys(r.Eval.Datasets))
	for _, name := range names {
		if err := add("eval.datasets."+name, r.Eval.Datasets[name]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EvalSets loads eval.datasets, each cut to its eval.sizes entry or
// eval.per_dataset questions, chosen as eval.subset says (see
// EvalSetsWithSubset, which also returns the manifest of the choice).
func EvalSets(r *recipes.Recipe) (map[string][]Question, error) {
	sets, _, err := EvalSetsWithSubset(r)
	return sets, err
}

// Exclude returns train without the questions of sets (by normalised
// text), and how many it dropped.
func Exclude(train []Question, sets map[string][]Question) ([]Question, int) {
	held := map[string]bool{}
	for _, qs := range sets {
		for _, q := range qs {
			held[format.Normalize(q.Question)] = true
		}
	}
	kept := make([]Question, 0, len(train))
	for _, q := range train {
		if !held[format.Normalize(q.Question)] {
			kept = append(kept, q)
		}
	}
	return kept, len(train) - len(kept)
}

// Contamination says how many evaluation questions also appear in the
// training data (same normalised question text), "" when none do: training
// on them inflates the evaluation.
func Contamination(train []Question, sets map[string][]Question) string {
	seen := make(map[string]bool, len(train))
	for _, q := range train {
		seen[format.Normalize(q.Question)] = true
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		n := 0
		for _, q := range sets[name] {
			if seen[format.Normalize(q.Question)] {
				n++
			}
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d/%d", name, n, len(sets[name])))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "evaluation questions also in train.data (" + strings.Join(parts, ", ") + "): their EM is inflated by training on them; point train.data at a training split"
}
