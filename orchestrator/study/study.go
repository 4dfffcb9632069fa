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
	"strings"

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
	// Metric is the metric Analyse compares the arms on
	// (recipes.StudyMetrics: study.metric, or NewPlan's metric).
	Metric string
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
// eval.datasets entry. metric, when non-empty, replaces study.metric (one
// of recipes.StudyMetrics); reward_auc's intervals are over seeds, and it
// needs at least two.
func NewPlan(path string, sets, environ, only []string, seeds []int64, base, metric string) (*Plan, error) {
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
	switch {
	case metric == "":
		metric = r.Study.Metric
	case !slices.Contains(recipes.StudyMetrics, metric):
		return nil, fmt.Errorf("--metric %s: want one of %s", metric, strings.Join(recipes.StudyMetrics, ", "))
	}
	if metric == recipes.StudyMetricRewardAUC && len(seeds) < 2 {
		return nil, fmt.Errorf("metric %s: its intervals are over seeds, and %d seed gives none: run at least 2 (study.seeds or --seeds)", metric, len(seeds))
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
	plan := &Plan{Dir: r.Output.Dir, Base: base, Seeds: seeds, Datasets: r.Study.Datasets, Metric: metric}
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

// Run runs every arm of plan at every seed, one run after the other and
// seed by seed (every arm at the first seed, then at the second, ...), so
// that a study stopped early holds whole pairs; then it reports on them
// (Report: the table in opt.Format on opt.Out, results.StudyFile and
// results.StudyCurvesFile in plan.Dir).
func Run(ctx context.Context, plan *Plan, opt Options) (*results.Study, error) {
	out := opt.Out
	if out == nil {
		out = io.Discard
	}
	total := len(plan.Arms) * len(plan.Seeds)
	n := 0
	for i := range plan.Seeds {
		for _, arm := range plan.Arms {
			v := arm.Runs[i]
			n++
			fmt.Fprintf(out, "\n== run %d/%d: %s seed %d (%s)\n", n, total, arm.Name, plan.Seeds[i], v.Recipe.Switches())
			if err := runVariant(ctx, v, out, opt.AblateOptions); err != nil {
				return nil, fmt.Errorf("%s seed %d: %w", arm.Name, plan.Seeds[i], err)
			}
		}
	}
	fmt.Fprintln(out)
	return Report(plan, out, opt.Format)
}

// Report computes the table of plan's finished runs (Analyse), writes
// results.StudyFile and results.StudyCurvesFile into plan.Dir and prints
// the table to out in format (results.StudyTable): what Run does after
// its runs, and all orchestrate study --analyse does, so that a study can
// be read again, with another metric say, without running anything.
func Report(plan *Plan, out io.Writer, format string) (*results.Study, error) {
	s, curves, err := Analyse(plan)
	if err != nil {
		return nil, err
	}
	if err := Write(plan.Dir, s, curves); err != nil {
		return nil, err
	}
	return s, results.StudyTable(out, *s, format)
}

// Write writes s as results.StudyFile and curves as
// results.StudyCurvesFile into dir: the held-out EM curves for metric em,
// the training reward curves for reward_auc.
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
	what, axis := "Held-out EM", "held-out EM (%)"
	if s.Metric == recipes.StudyMetricRewardAUC {
		what, axis = "Training reward", "training reward: mean EM (%)"
	}
	return results.PlotStudyCurves(filepath.Join(dir, results.StudyCurvesFile), what+" by training step, mean over seeds, band min..max ("+filepath.Base(dir)+")", axis, curves)
}

// series is one run's curve: a value at each of steps, in increasing
// order.
type series struct {
	steps []int
	vals  []float64
}

// studySeed is what Analyse reads of one run for metric em: its held-out
// EM curve and the per-question EM at the last evaluation, keyed by
// dataset and id.
type studySeed struct {
	series
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
	return &studySeed{series: series{steps: steps, vals: em}, questions: byKey}, nil
}

// readRewardSeed reads the training reward curve of v's run and its mean
// over the steps (results.RewardAUC), for metric reward_auc: the run must
// have recorded every one of its train.steps.
func readRewardSeed(v Variant) (series, float64, error) {
	dir := v.Recipe.Output.Dir
	recs, err := (&results.RunDir{Path: dir}).ReadSteps()
	if err != nil {
		return series{}, 0, err
	}
	auc, n, err := results.RewardAUC(recs)
	if err != nil {
		return series{}, 0, fmt.Errorf("%s: %w", dir, err)
	}
	if n != v.Recipe.Train.Steps {
		return series{}, 0, fmt.Errorf("%s: %d of its train.steps %d steps recorded: the run has not finished", dir, n, v.Recipe.Train.Steps)
	}
	steps, reward := results.RewardCurve(recs)
	return series{steps: steps, vals: reward}, auc, nil
}

// Analyse reads the finished runs of plan and computes the study table
// on plan.Metric, and per arm its curve over the steps every seed has
// (mean, min and max over seeds).
//
// For em (or no metric): per arm, the held-out EM (results.PooledEM of
// the "search" strategy over plan.Datasets) of each seed's last
// evaluation, its mean and standard deviation over seeds, and the paired
// difference to the base arm with its interval (results.PairedBootstrapDiff
// over the questions both runs of a seed evaluated at their last
// evaluations, matched by dataset and id, StudyBootstrapIters resamples,
// StudyBootstrapSeed); the curves are the held-out EM's.
//
// For reward_auc: per arm, each seed's mean training reward over all its
// steps (results.RewardAUC; every run must have recorded its train.steps),
// its mean and standard deviation over seeds, and for the other arms the
// paired difference to the base by seed (the same index in plan.Seeds):
// the mean of the seeds' differences with its Student t interval
// (results.TInterval) and its bootstrap interval over seeds
// (results.BootstrapCI of the differences, StudyBootstrapIters resamples,
// StudyBootstrapSeed); the curves are the training reward's.
func Analyse(plan *Plan) (*results.Study, []results.StudyCurve, error) {
	baseIdx := slices.IndexFunc(plan.Arms, func(a Arm) bool { return a.Name == plan.Base })
	if baseIdx < 0 {
		return nil, nil, fmt.Errorf("study: the base %s did not run", plan.Base)
	}
	s := &results.Study{Base: plan.Base, Datasets: plan.Datasets, Strategy: results.CurvesStrategy,
		Resamples: results.StudyBootstrapIters, BootstrapSeed: results.StudyBootstrapSeed}
	if runs := plan.Arms[baseIdx].Runs; len(runs) > 0 {
		s.Optimisation = runs[0].Recipe.Optimisation()
	}
	var curves []results.StudyCurve
	var err error
	switch plan.Metric {
	case "", recipes.StudyMetricEM:
		s.Metric, s.Interval = recipes.StudyMetricEM, results.IntervalSeedsQuestions
		curves, err = analyseEM(plan, baseIdx, s)
	case recipes.StudyMetricRewardAUC:
		s.Metric, s.Interval, s.TInterval = recipes.StudyMetricRewardAUC, results.IntervalSeeds, results.IntervalT
		curves, err = analyseRewardAUC(plan, baseIdx, s)
	default:
		err = fmt.Errorf("study: unknown metric %q (known: %s)", plan.Metric, strings.Join(recipes.StudyMetrics, ", "))
	}
	if err != nil {
		return nil, nil, err
	}
	return s, curves, nil
}

// analyseEM fills s's rows on the held-out EM (Analyse) and returns the
// arms' held-out EM curves.
func analyseEM(plan *Plan, baseIdx int, s *results.Study) ([]results.StudyCurve, error) {
	read := make([][]*studySeed, len(plan.Arms))
	for i, arm := range plan.Arms {
		for _, v := range arm.Runs {
			ss, err := readStudySeed(v.Recipe.Output.Dir, plan.Datasets)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", arm.Name, err)
			}
			read[i] = append(read[i], ss)
		}
	}
	var curves []results.StudyCurve
	for i, arm := range plan.Arms {
		row := results.StudyRow{Variant: arm.Name, Switches: arm.Switches, Seeds: plan.Seeds, IsBase: i == baseIdx}
		var pairs []results.PairedRun
		var runs []series
		for j, ss := range read[i] {
			runs = append(runs, ss.series)
			row.EM = append(row.EM, ss.vals[len(ss.vals)-1])
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
				return nil, fmt.Errorf("%s: %w", arm.Name, err)
			}
			if math.IsNaN(d) {
				return nil, fmt.Errorf("%s: no question evaluated by both it and the base %s", arm.Name, plan.Base)
			}
			row.Diff, row.CI = d, [2]float64{lo, hi}
		}
		s.Rows = append(s.Rows, row)
		curves = append(curves, studyCurve(arm.Name, runs))
	}
	return curves, nil
}

// analyseRewardAUC fills s's rows on the mean training reward (Analyse)
// and returns the arms' training reward curves.
func analyseRewardAUC(plan *Plan, baseIdx int, s *results.Study) ([]results.StudyCurve, error) {
	if len(plan.Seeds) < 2 {
		return nil, fmt.Errorf("study: metric %s needs at least 2 seeds, the plan has %d", recipes.StudyMetricRewardAUC, len(plan.Seeds))
	}
	runs := make([][]series, len(plan.Arms))
	aucs := make([][]float64, len(plan.Arms))
	steps := make([]int, len(plan.Arms))
	for i, arm := range plan.Arms {
		for _, v := range arm.Runs {
			sr, auc, err := readRewardSeed(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", arm.Name, err)
			}
			runs[i] = append(runs[i], sr)
			aucs[i] = append(aucs[i], auc)
			steps[i] = sr.steps[len(sr.steps)-1]
		}
	}
	var curves []results.StudyCurve
	for i, arm := range plan.Arms {
		row := results.StudyRow{Variant: arm.Name, Switches: arm.Switches, Seeds: plan.Seeds, IsBase: i == baseIdx,
			RewardAUC: aucs[i], Step: steps[i]}
		row.Mean, row.SD = results.MeanSD(aucs[i])
		if !row.IsBase {
			base := aucs[baseIdx]
			if len(base) != len(aucs[i]) {
				return nil, fmt.Errorf("%s: %d runs, the base %s %d: the seeds do not pair", arm.Name, len(aucs[i]), plan.Base, len(base))
			}
			diffs := make([]float64, len(base))
			for j := range diffs {
				diffs[j] = aucs[i][j] - base[j]
			}
			d, tlo, thi := results.TInterval(diffs)
			lo, hi := results.BootstrapCI(diffs, results.StudyBootstrapIters, results.StudyBootstrapSeed)
			row.Diff, row.CI, row.TCI = d, [2]float64{lo, hi}, &[2]float64{tlo, thi}
		}
		s.Rows = append(s.Rows, row)
		curves = append(curves, studyCurve(arm.Name, runs[i]))
	}
	return curves, nil
}

// studyCurve is the mean, min and max over seeds at each step every seed
// has.
func studyCurve(label string, seeds []series) results.StudyCurve {
	c := results.StudyCurve{Label: label}
	for _, st := range seeds[0].steps {
		var vals []float64
		for _, ss := range seeds {
			if k := slices.Index(ss.steps, st); k >= 0 {
				vals = append(vals, ss.vals[k])
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
