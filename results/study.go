package results

import (
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hindsearch/hindsearch/recipes"
)

// StudyBootstrapIters is the number of resamples of a study's paired
// bootstrap.
const StudyBootstrapIters = 10000

// StudyBootstrapSeed seeds a study's paired bootstrap, so that the table is
// the same every time it is computed from the same runs.
const StudyBootstrapSeed uint64 = 15

// StudyFile and StudyCurvesFile are the names, inside a study's output
// directory, of the table's numbers (JSON) and of the learning curves (PNG).
const (
	StudyFile       = "study.json"
	StudyCurvesFile = "study-curves.png"
)

// PairedRun is one seed of a paired comparison: the per-question scores
// (EM, 0 or 1) of a variant and of the base run at the same seed, where
// index i of Variant and of Base is the same question. Both slices have
// the same length.
type PairedRun struct {
	Variant, Base []float64
}

// PairedBootstrapDiff returns the mean paired difference variant - base
// of runs and its 95% percentile-bootstrap confidence interval, paired by
// seed and by question. The statistic is the mean over seeds of the
// per-seed mean over questions of Variant[i] - Base[i]. Each of iters
// resamples (StudyBootstrapIters when iters <= 0) draws len(runs) seeds
// with replacement and, for every seed drawn, that seed's questions with
// replacement (as many as it has), the same question indices for the
// variant and the base; the resampled statistic is computed on that draw.
// lo and hi are its 2.5th and 97.5th percentiles (linear interpolation).
// The result depends only on runs, iters and seed (math/rand/v2 PCG). Seeds
// with no questions are left out; with none left all three are NaN; with a
// single seed only questions vary. A run whose two slices differ in length
// is an error.
func PairedBootstrapDiff(runs []PairedRun, iters int, seed uint64) (diff, lo, hi float64, err error) {
	var diffs [][]float64
	for i, r := range runs {
		if len(r.Variant) != len(r.Base) {
			return 0, 0, 0, fmt.Errorf("paired bootstrap: seed %d has %d variant and %d base scores", i, len(r.Variant), len(r.Base))
		}
		if len(r.Variant) == 0 {
			continue
		}
		d := make([]float64, len(r.Variant))
		for j := range d {
			d[j] = r.Variant[j] - r.Base[j]
		}
		diffs = append(diffs, d)
	}
	if len(diffs) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), nil
	}
	for _, d := range diffs {
		diff += meanOf(d)
	}
	diff /= float64(len(diffs))
	if iters <= 0 {
		iters = StudyBootstrapIters
	}
	rng := newRand(seed)
	stats := make([]float64, iters)
	for it := range stats {
		var s float64
		for range diffs {
			s += resampledMean(rng, diffs[rng.IntN(len(diffs))])
		}
		stats[it] = s / float64(len(diffs))
	}
	slices.Sort(stats)
	alpha := (1 - bootstrapLevel) / 2
	return diff, quantile(stats, alpha), quantile(stats, 1-alpha), nil
}

// meanOf is the plain mean of the non-empty xs.
func meanOf(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// MeanSD returns the mean of xs and their sample standard deviation (n-1
// in the denominator; 0 for a single value). With no values both are NaN.
func MeanSD(xs []float64) (m, sd float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	m = meanOf(xs)
	if len(xs) == 1 {
		return m, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)-1))
}

// PooledEM returns, for every evaluation step of strategy in evals, the EM
// over datasets weighted by their questions (sum of EM x N over sum of N),
// and the steps in increasing order. Datasets not in datasets, and steps
// missing any of them, are left out. When a (step, dataset) occurs more than
// once the last record wins.
func PooledEM(evals []EvalRecord, strategy string, datasets []string) (steps []int, em []float64) {
	type key struct {
		step int
		ds   string
	}
	last := map[key]EvalRecord{}
	for _, r := range evals {
		if r.Strategy == strategy && slices.Contains(datasets, r.Dataset) {
			last[key{r.Step, r.Dataset}] = r
			if !slices.Contains(steps, r.Step) {
				steps = append(steps, r.Step)
			}
		}
	}
	slices.Sort(steps)
	var kept []int
	for _, st := range steps {
		var num, den float64
		ok := true
		for _, ds := range datasets {
			r, found := last[key{st, ds}]
			if !found {
				ok = false
				break
			}
			num += r.EM * float64(r.N)
			den += float64(r.N)
		}
		if ok && den > 0 {
			kept = append(kept, st)
			em = append(em, num/den)
		}
	}
	return kept, em
}

// RewardAUC returns a run's mean training reward over its steps: the mean
// of reward_mean over steps 1..n of steps (steps.jsonl's records), n the
// last step recorded, which is the area under the training-reward curve
// (a unit of width per step) divided by the number of steps. A step
// recorded more than once counts its last record. No steps, or a step of
// 1..n missing, is an error.
func RewardAUC(steps []StepRecord) (auc float64, n int, err error) {
	at, reward := RewardCurve(steps)
	if len(at) == 0 {
		return 0, 0, fmt.Errorf("reward auc: no training steps recorded")
	}
	n = at[len(at)-1]
	for i, st := range at {
		if st != i+1 {
			return 0, 0, fmt.Errorf("reward auc: step %d of 1..%d is not recorded", i+1, n)
		}
		auc += reward[i]
	}
	return auc / float64(n), n, nil
}

// RewardCurve returns the training reward curve of steps (steps.jsonl's
// records): the steps recorded, in increasing order, and each one's
// reward_mean (a step recorded more than once: its last record).
func RewardCurve(steps []StepRecord) (at []int, reward []float64) {
	last := map[int]float64{}
	for _, r := range steps {
		last[r.Step] = r.RewardMean
	}
	at = slices.Sorted(maps.Keys(last))
	for _, st := range at {
		reward = append(reward, last[st])
	}
	return at, reward
}

// StudyRow is one row of a study's table. EM and reward values are
// fractions in [0,1].
type StudyRow struct {
	// Variant names the variant ("base" for the unmodified recipe).
	Variant string `json:"variant"`
	// Switches are its recipe overrides, for the caption.
	Switches string `json:"switches"`
	// Seeds are the seeds run, and EM the held-out EM of each at its last
	// evaluation, in the same order (metric em; null for reward_auc).
	Seeds []int64   `json:"seeds"`
	EM    []float64 `json:"em"`
	// RewardAUC is, per seed in the same order, the run's mean training
	// reward over its steps (RewardAUC; metric reward_auc only).
	RewardAUC []float64 `json:"reward_auc,omitempty"`
	// Step is the last evaluation step the EM was read at (em), or the
	// last training step, the steps 1..Step the reward was averaged over
	// (reward_auc).
	Step int `json:"step"`
	// Questions is the number of held-out questions per seed (0 for
	// reward_auc, which reads none).
	Questions int `json:"questions"`
	// Mean and SD are the mean and sample standard deviation over seeds
	// of the study's metric (EM or RewardAUC).
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	// Diff is the paired difference to the base and CI its 95% interval
	// (Study.Interval says which); zero for the base itself.
	Diff float64    `json:"diff"`
	CI   [2]float64 `json:"ci"`
	// TCI is the 95% Student t interval of Diff over seeds (Study.TInterval;
	// reward_auc only, absent for the base).
	TCI *[2]float64 `json:"t_ci,omitempty"`
	// IsBase marks the base row.
	IsBase bool `json:"is_base"`
}

// Study.Interval and Study.TInterval values: what a row's ci and t_ci are.
const (
	// IntervalSeedsQuestions: a 95% percentile bootstrap of the paired
	// difference over seeds and, within each, questions
	// (PairedBootstrapDiff; metric em).
	IntervalSeedsQuestions = "95% paired bootstrap over seeds and questions"
	// IntervalSeeds: a 95% percentile bootstrap of the mean of the seeds'
	// paired differences (BootstrapCI; metric reward_auc).
	IntervalSeeds = "95% paired bootstrap over seeds"
	// IntervalT: a 95% Student t interval of the mean of the seeds' paired
	// differences, n-1 degrees of freedom (TInterval; metric reward_auc).
	IntervalT = "95% Student t over seeds (n-1 df), paired by seed"
)

// Study is what study.json holds: the table and how it was computed.
type Study struct {
	// Base names the variant the differences are taken against.
	Base string `json:"base"`
	// Datasets are the held-out datasets pooled into the EM.
	Datasets []string `json:"datasets"`
	// Strategy is the evaluation strategy read.
	Strategy string `json:"strategy"`
	// Metric is the metric the rows compare: "em" (the held-out EM) or
	// "reward_auc" (the mean training reward over the steps); a study.json
	// written before it existed has none, and is em.
	Metric string `json:"metric"`
	// Interval says what each row's ci is (IntervalSeedsQuestions for em,
	// IntervalSeeds for reward_auc), TInterval what its t_ci is
	// (IntervalT; reward_auc only).
	Interval  string `json:"interval"`
	TInterval string `json:"t_interval,omitempty"`
	// Resamples and BootstrapSeed parameterise the paired bootstrap.
	Resamples     int    `json:"resamples"`
	BootstrapSeed uint64 `json:"bootstrap_seed"`
	// Rows are the variants, the base first.
	Rows []StudyRow `json:"rows"`
	// Optimisation names how the base trains (recipes.Recipe.Optimisation).
	Optimisation string `json:"optimisation,omitempty"`
}

// StudyTable writes the study's table to w in format (one of Formats():
// table, markdown or csv): one row per variant with the mean of the
// study's metric (%) over seeds, its standard deviation, and the paired
// difference to the base with its 95% interval (percentage points): for
// em (or no Metric) the held-out EM and the bootstrap over seeds and
// questions; for reward_auc the mean training reward over the steps, the t
// interval and the bootstrap over seeds. table and markdown end with a
// caption saying what the numbers are; csv has none.
func StudyTable(w io.Writer, s Study, format string) error {
	auc := s.Metric == recipes.StudyMetricRewardAUC
	header := []string{"variant", "seeds", "step", "EM", "sd", "diff vs " + s.Base, "95% CI"}
	csvHeader := []string{"variant", "seeds", "step", "em", "sd", "diff", "ci_lo", "ci_hi"}
	if auc {
		header = []string{"variant", "seeds", "steps", "reward AUC", "sd", "diff vs " + s.Base, "95% t CI", "95% bootstrap CI"}
		csvHeader = []string{"variant", "seeds", "steps", "reward_auc", "sd", "diff", "t_lo", "t_hi", "ci_lo", "ci_hi"}
	}
	pct := func(x float64) string { return strconv.FormatFloat(100*x, 'f', 1, 64) }
	var rows, csvRows [][]string
	for _, r := range s.Rows {
		diff, ci := pct(r.Diff), fmt.Sprintf("[%s, %s]", pct(r.CI[0]), pct(r.CI[1]))
		tci, tlo, thi := "-", "", ""
		if r.TCI != nil {
			tlo, thi = pct(r.TCI[0]), pct(r.TCI[1])
			tci = fmt.Sprintf("[%s, %s]", tlo, thi)
		}
		if r.IsBase {
			diff, ci, tci = "-", "-", "-"
		}
		row := []string{r.Variant, strconv.Itoa(len(r.Seeds)), strconv.Itoa(r.Step), pct(r.Mean), pct(r.SD), diff, ci}
		csvRow := []string{r.Variant, strconv.Itoa(len(r.Seeds)), strconv.Itoa(r.Step), pct(r.Mean), pct(r.SD), pct(r.Diff), pct(r.CI[0]), pct(r.CI[1])}
		if auc {
			row = append(row[:6], tci, ci)
			csvRow = append(csvRow[:6], tlo, thi, pct(r.CI[0]), pct(r.CI[1]))
		}
		rows, csvRows = append(rows, row), append(csvRows, csvRow)
	}
	caption := fmt.Sprintf("Held-out EM (%%) at the last evaluation (%s, strategy %s, pooled over questions), mean and sd over seeds;\n"+
		"diff: paired difference to %s in points, 95%% paired bootstrap CI (%d resamples of seeds and, within each, of questions; seed %d).",
		strings.Join(s.Datasets, ", "), s.Strategy, s.Base, s.Resamples, s.BootstrapSeed)
	if auc {
		caption = fmt.Sprintf("Training reward AUC (%%): each run's mean of reward_mean (the mean EM reward of a step's sampled trajectories) over its\n"+
			"training steps 1..steps, the area under its training-reward curve over the number of steps; mean and sd over seeds.\n"+
			"diff: paired difference to %s in points (same seed), with its 95%% Student t interval over seeds (n-1 df) and\n"+
			"its 95%% percentile bootstrap over seeds (%d resamples of the seeds' differences; seed %d).",
			s.Base, s.Resamples, s.BootstrapSeed)
	}
	if s.Optimisation != "" {
		caption += "\nTraining: " + s.Optimisation + "."
	}
	for _, r := range s.Rows {
		if r.Switches != "" {
			caption += fmt.Sprintf("\n  %s: %s", r.Variant, r.Switches)
		}
	}
	var err error
	switch format {
	case "table":
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		if err = tw.Flush(); err == nil {
			_, err = fmt.Fprintln(w, caption)
		}
	case "markdown":
		var b strings.Builder
		b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
		for range header {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for _, r := range rows {
			b.WriteString("| " + strings.Join(r, " | ") + " |\n")
		}
		b.WriteString("\n" + caption + "\n")
		_, err = io.WriteString(w, b.String())
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(csvHeader)
		for _, r := range csvRows {
			cw.Write(r)
		}
		cw.Flush()
		err = cw.Error()
	default:
		return fmt.Errorf("study table: unknown format %q (known: %s)", format, strings.Join(Formats(), ", "))
	}
	if err != nil {
		return fmt.Errorf("study table: %w", err)
	}
	return nil
}
