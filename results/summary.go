package results

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hindsearch/hindsearch/recipes"
	"go.yaml.in/yaml/v3"
)

// RecipeFile is the resolved recipe the orchestrator saves in a run
// directory.
const RecipeFile = "recipe.yaml"

// RunSummary is one row of a comparison table: the scores of one strategy
// at one step of a run, or a published reference row.
type RunSummary struct {
	// Name labels the row: the run directory's base name, or the
	// reference's description.
	Name string
	// Dir is the run directory ("" for a reference row).
	Dir string
	// Step is the evaluation step; negative for a reference row, which has
	// none.
	Step int
	// Strategy is the evaluation strategy ("" for a reference row).
	Strategy string
	// N maps a dataset to its number of evaluated questions.
	N map[string]int
	// EM maps a dataset to its exact-match rate (a fraction).
	EM map[string]float64
	// F1 maps a dataset to its mean token F1 (a fraction).
	F1 map[string]float64
	// CI maps a dataset to the 95% bootstrap confidence interval of its EM
	// (fractions); only datasets with per-question records have one.
	CI map[string][2]float64
	// AvgEM is the mean EM over the row's datasets.
	AvgEM float64
	// AvgCI is the 95% bootstrap confidence interval of AvgEM; valid only
	// when HasCI is set.
	AvgCI [2]float64
	// HasCI is set when every dataset of the row has per-question records,
	// so that AvgCI (and every entry of CI) is valid.
	HasCI bool
	// Caption describes where the row comes from, for a table caption: the
	// hindsight switches of the run's recipe.yaml, or the source of a
	// reference row ("" when there is nothing to say).
	Caption string
}

// SummaryOptions tunes SummariseRunWith.
type SummaryOptions struct {
	// ByStep asks for one summary per (step, strategy) instead of one per
	// strategy at its last evaluated step.
	ByStep bool
	// CIIters is the number of bootstrap resamples (0:
	// DefaultBootstrapIters).
	CIIters int
	// NoCI skips the confidence intervals even when per-question records
	// exist.
	NoCI bool
	// Seed seeds the bootstrap (DefaultBootstrapSeed in SummariseRun).
	Seed uint64
}

// SummariseRun summarises the run directory dir with the default options
// (DefaultBootstrapIters resamples, DefaultBootstrapSeed): see
// SummariseRunWith.
func SummariseRun(dir string, byStep bool) ([]RunSummary, error) {
	return SummariseRunWith(dir, SummaryOptions{ByStep: byStep, Seed: DefaultBootstrapSeed})
}

// SummariseRunWith reads eval.jsonl of the run directory dir and returns
// one summary per strategy at the last step it was evaluated at, strategies
// in the order they first appear; or, with opts.ByStep, one per (step,
// strategy) in the order of Summarise. Scores, N and averages come from
// eval.jsonl (the last record of a (step, strategy, dataset) wins). Where
// questions/ holds the per-question records of a row, the row gets
// bootstrap confidence intervals of its EM. Every row's Name is the base
// name of dir, and its Caption names the hindsight switches of dir's
// recipe.yaml when there is one. Errors name dir, e.g. "runs/x: no
// eval.jsonl".
func SummariseRunWith(dir string, opts SummaryOptions) ([]RunSummary, error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: no such run directory", dir)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", dir, err)
	case !st.IsDir():
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	d := &RunDir{Path: dir}
	recs, err := d.ReadEval()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		if _, err := os.Stat(filepath.Join(dir, EvalFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: no %s", dir, EvalFile)
		}
		return nil, fmt.Errorf("%s: %s has no records", dir, EvalFile)
	}
	caption, err := recipeCaption(dir)
	if err != nil {
		return nil, err
	}

	type cell struct {
		step              int
		strategy, dataset string
	}
	n := map[cell]int{}
	for _, r := range recs {
		n[cell{r.Step, r.Strategy, r.Dataset}] = r.N
	}
	rows := Summarise(recs)
	if !opts.ByStep {
		last := map[string]int{}
		var order []string
		for i, r := range rows {
			if _, ok := last[r.Strategy]; !ok {
				order = append(order, r.Strategy)
			}
			last[r.Strategy] = i
		}
		var kept []EvalRow
		for _, s := range order {
			kept = append(kept, rows[last[s]])
		}
		rows = kept
	}

	name := filepath.Base(filepath.Clean(dir))
	out := make([]RunSummary, 0, len(rows))
	for _, r := range rows {
		s := RunSummary{
			Name:     name,
			Dir:      dir,
			Step:     r.Step,
			Strategy: r.Strategy,
			N:        map[string]int{},
			EM:       r.EM,
			F1:       r.F1,
			CI:       map[string][2]float64{},
			AvgEM:    r.AvgEM,
			Caption:  caption,
		}
		for ds := range r.EM {
			s.N[ds] = n[cell{r.Step, r.Strategy, ds}]
		}
		if !opts.NoCI && checkStrategy(r.Strategy) == nil {
			if err := addCIs(d, &s, opts); err != nil {
				return nil, err
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// addCIs fills in the confidence intervals of s from its per-question
// records, if any.
func addCIs(d *RunDir, s *RunSummary, opts SummaryOptions) error {
	qs, err := d.ReadQuestions(s.Step, s.Strategy)
	if err != nil {
		return err
	}
	byDataset := map[string][]float64{}
	for _, q := range qs {
		if _, ok := s.EM[q.Dataset]; ok {
			byDataset[q.Dataset] = append(byDataset[q.Dataset], q.EM)
		}
	}
	for _, ds := range slices.Sorted(maps.Keys(byDataset)) {
		lo, hi := BootstrapCI(byDataset[ds], opts.CIIters, opts.Seed)
		s.CI[ds] = [2]float64{lo, hi}
	}
	if len(byDataset) > 0 && len(byDataset) == len(s.EM) {
		lo, hi := BootstrapAverageCI(byDataset, opts.CIIters, opts.Seed)
		s.AvgCI, s.HasCI = [2]float64{lo, hi}, true
	}
	return nil
}

// SubsetFile is the run directory's manifest of the evaluated questions:
// per dataset, the source file's sha256, how they were chosen and their
// ids (orchestrator/dataset.Subset; eval.subset accepts it back).
const SubsetFile = "eval_subset.json"

// recipeSwitches is the part of a saved recipe a caption names.
type recipeSwitches struct {
	Name      string `yaml:"name"`
	Hindsight *struct {
		Enabled    *bool    `yaml:"enabled"`
		GoldAnswer *bool    `yaml:"gold_answer"`
		Loss       string   `yaml:"loss"`
		Broadcast  string   `yaml:"broadcast"`
		Teacher    string   `yaml:"teacher"`
		Coef       *float64 `yaml:"coef"`
		Clamp      *float64 `yaml:"clamp"`
	} `yaml:"hindsight"`
	// Eval says which questions were evaluated (eval_subset.json lists
	// them).
	Eval *struct {
		PerDataset int            `yaml:"per_dataset"`
		Sizes      map[string]int `yaml:"sizes"`
		Subset     string         `yaml:"subset"`
		SubsetSeed int64          `yaml:"subset_seed"`
	} `yaml:"eval"`
}

// recipeCaption returns "<base name>: <switches>" from dir's recipe.yaml,
// or "" when dir has none. The switches are those of recipes.Switches
// that the file sets, e.g. "hindsight=on gold=off loss=clamp coef=1", or
// "hindsight=off"; the recipe's name is added when it differs from the
// directory's.
func recipeCaption(dir string) (string, error) {
	path := filepath.Join(dir, RecipeFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	var r recipeSwitches
	if err := yaml.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	base := filepath.Base(filepath.Clean(dir))
	var parts []string
	if r.Name != "" && r.Name != base {
		parts = append(parts, "recipe="+r.Name)
	}
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	num := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	if h := r.Hindsight; h == nil {
		parts = append(parts, "no hindsight keys")
	} else if h.Enabled != nil && !*h.Enabled {
		parts = append(parts, "hindsight=off")
	} else {
		if h.Enabled != nil {
			parts = append(parts, "hindsight=on")
		}
		if h.GoldAnswer != nil {
			parts = append(parts, "gold="+onOff(*h.GoldAnswer))
		}
		for _, kv := range [][2]string{{"loss", h.Loss}, {"broadcast", h.Broadcast}, {"teacher", h.Teacher}} {
			if kv[1] != "" {
				parts = append(parts, kv[0]+"="+kv[1])
			}
		}
		if h.Coef != nil {
			parts = append(parts, "coef="+num(*h.Coef))
		}
		if h.Clamp != nil {
			parts = append(parts, "clamp="+num(*h.Clamp))
		}
	}
	if e := r.Eval; e != nil && e.Subset != "" {
		// Saved before eval.subset existed: the caption says nothing.
		q := recipes.Eval{PerDataset: e.PerDataset, Sizes: e.Sizes, Subset: e.Subset, SubsetSeed: e.SubsetSeed}.Describe()
		if _, err := os.Stat(filepath.Join(dir, SubsetFile)); err == nil {
			q += ", ids in " + SubsetFile
		}
		parts = append(parts, "questions: "+q)
	}
	return base + ": " + strings.Join(parts, " "), nil
}

// ReferenceNames returns the names Reference knows.
func ReferenceNames() []string { return []string{"search-r1"} }

// Reference returns the published rows of the named reference, with
// Step -1 and no strategy, for printing above a run's rows. "search-r1"
// gives the exact-match numbers of PROTOCOLS.md §1 (Qwen2.5-3B-Instruct):
// Search-R1 GRPO per dataset, and the averages of its RAG and direct
// baselines and of HindSearch with and without the gold answer shown to the
// judge. Datasets a row does not report are absent from its EM map.
func Reference(name string) ([]RunSummary, error) {
	switch name {
	case "search-r1":
		const caption = "Published: EM of Qwen2.5-3B-Instruct as reported for Search-R1 GRPO and its RAG and direct baselines, and for HindSearch (PROTOCOLS.md §1)."
		row := func(name string, avg float64, em map[string]float64) RunSummary {
			if em == nil {
				em = map[string]float64{}
			}
			return RunSummary{Name: name, Step: -1, N: map[string]int{}, EM: em, F1: map[string]float64{},
				CI: map[string][2]float64{}, AvgEM: avg, Caption: caption}
		}
		return []RunSummary{
			row("Search-R1 GRPO (published, Qwen2.5-3B-Instruct)", .336, map[string]float64{
				"nq": .397, "triviaqa": .565, "popqa": .391, "hotpotqa": .331,
				"2wikimultihopqa": .310, "musique": .124, "bamboogle": .232,
			}),
			row("RAG (published)", .270, nil),
			row("Direct (published)", .134, nil),
			row("HindSearch (published)", .394, nil),
			row("HindSearch, no-gold judge (published)", .347, nil),
		}, nil
	}
	return nil, fmt.Errorf("unknown reference %q (known: %s)", name, strings.Join(ReferenceNames(), ", "))
}

// validCI reports whether ci holds two finite bounds.
func validCI(ci [2]float64) bool {
	return !math.IsNaN(ci[0]) && !math.IsNaN(ci[1]) && !math.IsInf(ci[0], 0) && !math.IsInf(ci[1], 0)
}
