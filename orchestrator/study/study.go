package study

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// Arm is one variant of a study: its name, its recipe overrides and
// one run per seed, in the order of Plan.Seeds.
type Arm struct {
	Name     string
	Switches string
	Runs     []Variant
}

// Plan is a resolved study: the arms, the base first, each run at
// every seed.
type Plan struct {
	// Dir is the study's directory (the recipe's output.dir); run s of arm
	// v writes to Dir/<v>/seed-<s>.
	Dir string
	// Base names the arm the differences are taken against.
	Base string
	// Seeds are the seeds every arm runs at.
	Seeds []int64
	// Datasets are the held-out datasets (study.datasets).
	Datasets []string
	// Arms are the base, then the other variants in name order.
	Arms []Arm
}

// NewPlan resolves the study of the recipe at path. seeds, when
// non-empty, replaces study.seeds; base, when non-empty, study.base. only,
// when non-empty, selects variants by name. The arms are the study base
// and the selected variants; the unmodified recipe (BaseVariant) is an arm
// only when it is the study base, or when only names it, or when only is
// empty and the recipe's variants do not include study.base (it then is
// the base). Each seed's run is the variant with seed=<s> set after the
// --set overrides and the variant's own, and its output.dir is
// <output.dir>/<variant>/seed-<s>. Every study.datasets name must be an
// eval.datasets entry.
func NewPlan(path string, sets, environ, only []string, seeds []int64, base string) (*Plan, error) {
	r, err := recipes.Load(path, sets, environ)
	if err != nil {
		return nil, err
	}
	if len(seeds) == 0 {
		seeds = r.Study.Seeds
	}
	if base == "" {
		base = r.Study.Base
	}
	if _, ok := r.Variants[base]; base != recipes.StudyBase && !ok {
		return nil, fmt.Errorf("--base %s: the recipe has no such variant", base)
	}
	for _, ds := range r.Study.Datasets {
		if _, ok := r.Eval.Datasets[ds]; !ok {
			return nil, fmt.Errorf("study.datasets: %q is not an eval.datasets entry", ds)
		}
	}
	if len(only) > 0 && !slices.Contains(only, base) {
		only = append(slices.Clone(only), base)
	}
	plan := &Plan{Dir: r.Output.Dir, Base: base, Seeds: seeds, Datasets: r.Study.Datasets}
	idx := map[string]int{}
	for _, s := range seeds {
		vs, err := Variants(path, append(slices.Clone(sets), "seed="+strconv.FormatInt(s, 10)), environ, only)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if v.Skip != "" {
				return nil, fmt.Errorf("variant %s: %s", v.Name, v.Skip)
			}
			if v.Name == BaseVariant && base != BaseVariant && !slices.Contains(only, BaseVariant) {
				continue
			}
			v.Recipe.Output.Dir = filepath.Join(plan.Dir, v.Name, "seed-"+strconv.FormatInt(s, 10))
			i, ok := idx[v.Name]
			if !ok {
				i = len(plan.Arms)
				idx[v.Name] = i
				sw := v.Recipe.Switches()
				if v.Name != BaseVariant {
					sw = fmt.Sprintf("%v", r.Variants[v.Name])
				}
				plan.Arms = append(plan.Arms, Arm{Name: v.Name, Switches: sw})
			}
			plan.Arms[i].Runs = append(plan.Arms[i].Runs, v)
		}
	}
	slices.SortStableFunc(plan.Arms, func(a, b Arm) int {
		switch {
		case a.Name == base && b.Name != base:
			return -1
		case b.Name == base && a.Name != base:
			return 1
		}
		return 0
	})
	return plan, nil
}

// Options configure Run.
type Options struct {
	AblateOptions
}

// Run runs every arm of plan at every seed, one run after the other,
// then computes its table (Analyse), prints it to opt.Out in
// opt.Format, and writes results.StudyFile and results.StudyCurvesFile to
// plan.Dir.
func Run(ctx context.Context, plan *Plan, opt Options) (*results.Study, error) {
	out := opt.Out
	if out == nil {
		out = io.Discard
	}
	total := len(plan.Arms) * len(plan.Seeds)
	n := 0
	for _, arm := range plan.Arms {
		for i, v := range arm.Runs {
			n++
			fmt.Fprintf(out, "\n== run %d/%d: %s seed %d (%s)\n", n, total, arm.Name, plan.Seeds[i], v.Recipe.Switches())
			if err := runVariant(ctx, v, out, opt.AblateOptions); err != nil {
				return nil, fmt.Errorf("%s seed %d: %w", arm.Name, plan.Seeds[i], err)
			}
		}
	}
	s, curves, err := Analyse(plan)
	if err != nil {
		return nil, err
	}
	if err := Write(plan.Dir, s, curves); err != nil {
		return nil, err
	}
	fmt.Fprintln(out)
	return s, results.StudyTable(out, *s, opt.Format)
}

// Write writes s as results.StudyFile and curves as
// results.StudyCurvesFile into dir.
func Write(dir string, s *results.Study, curves []results.StudyCurve) error {
	d, err := results.Create(dir)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("study: %w", err)
	}
	if err := d.WriteFileAtomic(results.StudyFile, append(b, '\n')); err != nil {
		return err
	}
	return results.PlotStudyCurves(filepath.Join(dir, results.StudyCurvesFile), "Held-out EM by training step, mean over seeds, band min..max ("+filepath.Base(dir)+")", curves)
}

// studySeed is what Analyse reads of one run: its held-out EM curve
// and the per-question EM at the last evaluation, keyed by dataset and id.
type studySeed struct {
	steps     []int
	em        []float64
	questions map[string]float64
}

// readStudySeed reads the run directory dir.
func readStudySeed(dir string, datasets []string) (*studySeed, error) {
	d := &results.RunDir{Path: dir}
	evals, err := d.ReadEval()
	if err != nil {
		return nil, err
	}
	steps, em := results.PooledEM(evals, results.CurvesStrategy, datasets)
	if len(steps) == 0 {
		return nil, fmt.Errorf("%s: no %s evaluation of %v", dir, results.CurvesStrategy, datasets)
	}
	qs, err := d.ReadQuestions(steps[len(steps)-1], results.CurvesStrategy)
	if err != nil {
		return nil, err
	}
	byKey := map[string]float64{}
	for _, q := range qs {
		if slices.Contains(datasets, q.Dataset) {
			byKey[q.Dataset+"\x00"+q.ID] = q.EM
		}
	}
	return &studySeed{steps: steps, em: em, questions: byKey}, nil
}

// Analyse reads the finished runs of plan and computes the study
// table: per arm, the held-out EM (results.PooledEM of the "search"
// strategy over plan.Datasets) of each seed's last evaluation, its mean
// and standard deviation over seeds, and the paired difference to the base
// arm with its interval (results.PairedBootstrapDiff over the questions
// both runs of a seed evaluated at their last evaluations, matched by
// dataset and id, StudyBootstrapIters resamples, StudyBootstrapSeed); and
// per arm the learning curve over the steps every seed evaluated.
func Analyse(plan *Plan) (*results.Study, []results.StudyCurve, error) {
	s := &results.Study{Base: plan.Base, Datasets: plan.Datasets, Strategy: results.CurvesStrategy,
		Resamples: results.StudyBootstrapIters, BootstrapSeed: results.StudyBootstrapSeed}
	read := make([][]*studySeed, len(plan.Arms))
	baseIdx := -1
	for i, arm := range plan.Arms {
		if arm.Name == plan.Base {
			baseIdx = i
		}
		for _, v := range arm.Runs {
			ss, err := readStudySeed(v.Recipe.Output.Dir, plan.Datasets)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", arm.Name, err)
			}
			read[i] = append(read[i], ss)
		}
	}
	if baseIdx < 0 {
		return nil, nil, fmt.Errorf("study: the base %s did not run", plan.Base)
	}
	if runs := plan.Arms[baseIdx].Runs; len(runs) > 0 {
		s.Optimisation = runs[0].Recipe.Optimisation()
	}
	var curves []results.StudyCurve
	for i, arm := range plan.Arms {
		row := results.StudyRow{Variant: arm.Name, Switches: arm.Switches, Seeds: plan.Seeds, IsBase: i == baseIdx}
		var pairs []results.PairedRun
		for j, ss := range read[i] {
			row.EM = append(row.EM, ss.em[len(ss.em)-1])
			row.Step = ss.steps[len(ss.steps)-1]
			row.Questions = len(ss.questions)
			base := read[baseIdx][j]
			var pr results.PairedRun
			for _, k := range slices.Sorted(maps.Keys(ss.questions)) {
				if b, ok := base.questions[k]; ok {
					pr.Variant = append(pr.Variant, ss.questions[k])
					pr.Base = append(pr.Base, b)
				}
			}
			pairs = append(pairs, pr)
		}
		row.Mean, row.SD = results.MeanSD(row.EM)
		if !row.IsBase {
			d, lo, hi, err := results.PairedBootstrapDiff(pairs, results.StudyBootstrapIters, results.StudyBootstrapSeed)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", arm.Name, err)
			}
			if math.IsNaN(d) {
				return nil, nil, fmt.Errorf("%s: no question evaluated by both it and the base %s", arm.Name, plan.Base)
			}
			row.Diff, row.CI = d, [2]float64{lo, hi}
		}
		s.Rows = append(s.Rows, row)
		curves = append(curves, studyCurve(arm.Name, read[i]))
	}
	return s, curves, nil
}

// studyCurve is the mean, min and max over seeds at each step every seed
// evaluated.
func studyCurve(label string, seeds []*studySeed) results.StudyCurve {
	c := results.StudyCurve{Label: label}
	for _, st := range seeds[0].steps {
		var vals []float64
		for _, ss := range seeds {
			if k := slices.Index(ss.steps, st); k >= 0 {
				vals = append(vals, ss.em[k])
			}
		}
		if len(vals) != len(seeds) {
			continue
		}
		m, _ := results.MeanSD(vals)
		c.Steps = append(c.Steps, st)
		c.Mean = append(c.Mean, m)
		c.Min = append(c.Min, slices.Min(vals))
		c.Max = append(c.Max, slices.Max(vals))
	}
	return c
}
