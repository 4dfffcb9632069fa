package dataset

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/hindsearch/hindsearch/clients/hub"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/recipes"
)

// Subset says exactly which questions an evaluation used, per dataset: a
// run writes it (results.SubsetFile), and eval.subset accepts it back, so that two
// projects evaluate on the same questions.
type Subset struct {
	// Datasets maps an eval.datasets name to its questions.
	Datasets map[string]SubsetSet `json:"datasets"`
}

// SubsetSet is one dataset's chosen questions.
type SubsetSet struct {
	// File is the source file's name, SHA256 its contents' hash: a
	// manifest applied to another file is refused.
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	// Total is the file's question count; N the chosen ones.
	Total int `json:"total"`
	N     int `json:"n"`
	// How is first, random, all, searchr1-test or rand1000 (or
	// manifest: read from one); Seed the random draw's seed.
	How  string `json:"how"`
	Seed int64  `json:"seed,omitempty"`
	// From names the file a named subset's questions were read from
	// (rand1000: the eval-rand1000 bundle's), FromSHA256 its hash.
	From       string `json:"from,omitempty"`
	FromSHA256 string `json:"from_sha256,omitempty"`
	// IDs are the chosen questions' ids, in evaluation order.
	IDs []string `json:"ids"`
}

// EvalSetsWithSubset loads eval.datasets and chooses each dataset's
// questions as eval.subset says (see recipes.Eval.Subset), returning the
// sets and the manifest of the choice.
func EvalSetsWithSubset(r *recipes.Recipe) (map[string][]Question, *Subset, error) {
	var from *Subset
	if p := r.Eval.SubsetManifest(); p != "" {
		s, err := ReadSubset(p)
		if err != nil {
			return nil, nil, fmt.Errorf("eval.subset: %w", err)
		}
		from = s
	}
	sets := map[string][]Question{}
	man := &Subset{Datasets: map[string]SubsetSet{}}
	names := make([]string, 0, len(r.Eval.Datasets))
	for name := range r.Eval.Datasets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := r.Eval.Datasets[name]
		qs, err := Load(f)
		if err != nil {
			return nil, nil, fmt.Errorf("eval.datasets.%s: %w", name, err)
		}
		sum, err := hub.FileSHA256(f)
		if err != nil {
			return nil, nil, fmt.Errorf("eval.datasets.%s: %w", name, err)
		}
		set := SubsetSet{File: filepath.Base(f), SHA256: sum, Total: len(qs), How: r.Eval.Subset}
		n := r.Eval.EvalSize(name)
		switch {
		case from != nil:
			want, ok := from.Datasets[name]
			if !ok {
				return nil, nil, fmt.Errorf("eval.subset %s: no dataset %q (it has %s)", r.Eval.Subset, name, from.names())
			}
			if want.SHA256 != sum {
				return nil, nil, fmt.Errorf("eval.subset %s: dataset %q was chosen from a file with sha256 %s, and %s has %s: not the same questions", r.Eval.Subset, name, want.SHA256, f, sum)
			}
			byID := make(map[string]Question, len(qs))
			for _, q := range qs {
				byID[q.ID] = q
			}
			var picked []Question
			for _, id := range want.IDs {
				q, ok := byID[id]
				if !ok {
					return nil, nil, fmt.Errorf("eval.subset %s: dataset %q: no question with id %q in %s", r.Eval.Subset, name, id, f)
				}
				picked = append(picked, q)
			}
			qs, set.How, set.Seed = picked, "manifest", want.Seed
			set.From, set.FromSHA256 = want.From, want.FromSHA256
		case r.Eval.Subset == recipes.SubsetSearchR1Test:
			if want := recipes.SearchR1TestSizes[name]; len(qs) != want {
				return nil, nil, fmt.Errorf("eval.subset %s: %s holds %d questions, and %s's in Search-R1's test split are %d: not that split (the eval-sets bundle's %s.jsonl is)", r.Eval.Subset, f, len(qs), name, want, name)
			}
		case r.Eval.Subset == recipes.SubsetRand1000:
			from := r.Eval.SubsetFiles[name]
			if from == "" {
				return nil, nil, fmt.Errorf("eval.subset %s: no file of %s's questions", r.Eval.Subset, name)
			}
			picked, fromSum, err := findQuestions(qs, from)
			if err != nil {
				return nil, nil, fmt.Errorf("eval.subset %s: dataset %q: %w", r.Eval.Subset, name, err)
			}
			qs, set.From, set.FromSHA256 = picked, filepath.Base(filepath.Dir(from))+"/"+filepath.Base(from), fromSum
		case r.Eval.Subset == recipes.SubsetAll || n <= 0 || n >= len(qs):
			if r.Eval.Subset == recipes.SubsetRandom {
				set.Seed = r.Eval.SubsetSeed
			}
		case r.Eval.Subset == recipes.SubsetRandom:
			qs = randomSubset(qs, n, r.Eval.SubsetSeed, name)
			set.Seed = r.Eval.SubsetSeed
		default:
			qs = qs[:n]
		}
		for i := range qs {
			qs[i].Dataset = name
			set.IDs = append(set.IDs, qs[i].ID)
		}
		set.N = len(qs)
		sets[name] = qs
		man.Datasets[name] = set
	}
	return sets, man, nil
}

// findQuestions returns the questions of qs that the question file from
// lists, in from's order, found by normalised question text (ids and gold
// answers are qs's: the eval.datasets file's), with from's sha256. A
// question asked twice in qs is taken once per time from asks it. Every
// question of from must be found: another split is refused, naming how
// many were not and the first.
func findQuestions(qs []Question, from string) ([]Question, string, error) {
	want, err := Load(from)
	if err != nil {
		return nil, "", err
	}
	sum, err := hub.FileSHA256(from)
	if err != nil {
		return nil, "", err
	}
	at := map[string][]int{}
	for i, q := range qs {
		k := format.Normalize(q.Question)
		at[k] = append(at[k], i)
	}
	picked := make([]Question, 0, len(want))
	var missing []string
	for _, w := range want {
		k := format.Normalize(w.Question)
		if len(at[k]) == 0 {
			missing = append(missing, w.Question)
			continue
		}
		picked = append(picked, qs[at[k][0]])
		at[k] = at[k][1:]
	}
	if len(missing) > 0 {
		return nil, "", fmt.Errorf("%d of the %d questions of %s are not in the dataset's file (the first: %q): not the split they were drawn from", len(missing), len(want), from, missing[0])
	}
	return picked, sum, nil
}

// randomSubset draws n of qs with seed (and the dataset's name, so that
// each dataset gets its own draw), keeping file order.
func randomSubset(qs []Question, n int, seed int64, name string) []Question {
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
	idx := rng.Perm(len(qs))[:n]
	slices.Sort(idx)
	out := make([]Question, n)
	for i, j := range idx {
		out[i] = qs[j]
	}
	return out
}

// ReadSubset reads a subset manifest.
func ReadSubset(path string) (*Subset, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Subset
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: not a subset manifest: %w", path, err)
	}
	if len(s.Datasets) == 0 {
		return nil, fmt.Errorf("%s: a subset manifest with no datasets", path)
	}
	return &s, nil
}

// Write writes the manifest to path (by way of a temporary file).
func (s *Subset) Write(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (s *Subset) names() string {
	var ns []string
	for n := range s.Datasets {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return fmt.Sprint(ns)
}
