package results

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
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

// StudyRow is one row of a study's table. EM values are fractions in [0,1].
type StudyRow struct {
	// Variant names the variant ("base" for the unmodified recipe).
	Variant string `json:"variant"`
	// Switches are its recipe overrides, for the caption.
	Switches string `json:"switches"`
	// Seeds are the seeds run, and EM the held-out EM of each at its last
	// evaluation, in the same order.
	Seeds []int64   `json:"seeds"`
	EM    []float64 `json:"em"`
	// Step is the last evaluation step the EM was read at.
	Step int `json:"step"`
	// Questions is the number of held-out questions per seed.
	Questions int `json:"questions"`
	// Mean and SD are the mean and sample standard deviation of EM over
	// seeds.
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	// Diff is the paired difference to the base (PairedBootstrapDiff) and
	// CI its 95% interval; zero for the base itself.
	Diff float64    `json:"diff"`
	CI   [2]float64 `json:"ci"`
	// IsBase marks the base row.
	IsBase bool `json:"is_base"`
}

// Study is what study.json holds: the table and how it was computed.
type Study struct {
	// Base names the variant the differences are taken against.
	Base string `json:"base"`
	// Datasets are the held-out datasets pooled into the EM.
	Datasets []string `json:"datasets"`
	// Strategy is the evaluation strategy read.
	Strategy string `json:"strategy"`
	// Resamples and BootstrapSeed parameterise the paired bootstrap.
	Resamples     int    `json:"resamples"`
	BootstrapSeed uint64 `json:"bootstrap_seed"`
	// Rows are the variants, the base first.
	Rows []StudyRow `json:"rows"`
	// Optimisation names how the base trains (recipes.Recipe.Optimisation).
	Optimisation string `json:"optimisation,omitempty"`
}

// StudyTable writes the study's table to w in format (one of Formats():
// table, markdown or csv): one row per variant with the mean held-out EM
// (%) over seeds, its standard deviation, and the paired difference to the
// base with its 95% interval (percentage points). table and markdown end
// with a caption saying what the numbers are; csv has none.
func StudyTable(w io.Writer, s Study, format string) error {
	header := []string{"variant", "seeds", "step", "EM", "sd", "diff vs " + s.Base, "95% CI"}
	pct := func(x float64) string { return strconv.FormatFloat(100*x, 'f', 1, 64) }
	var rows [][]string
	for _, r := range s.Rows {
		diff, ci := pct(r.Diff), fmt.Sprintf("[%s, %s]", pct(r.CI[0]), pct(r.CI[1]))
		if r.IsBase {
			diff, ci = "-", "-"
		}
		rows = append(rows, []string{r.Variant, strconv.Itoa(len(r.Seeds)), strconv.Itoa(r.Step), pct(r.Mean), pct(r.SD), diff, ci})
	}
	caption := fmt.Sprintf("Held-out EM (%%) at the last evaluation (%s, strategy %s, pooled over questions), mean and sd over seeds;\n"+
		"diff: paired difference to %s in points, 95%% paired bootstrap CI (%d resamples of seeds and, within each, of questions; seed %d).",
		strings.Join(s.Datasets, ", "), s.Strategy, s.Base, s.Resamples, s.BootstrapSeed)
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
		cw.Write([]string{"variant", "seeds", "step", "em", "sd", "diff", "ci_lo", "ci_hi"})
		for _, r := range s.Rows {
			cw.Write([]string{r.Variant, strconv.Itoa(len(r.Seeds)), strconv.Itoa(r.Step), pct(r.Mean), pct(r.SD), pct(r.Diff), pct(r.CI[0]), pct(r.CI[1])})
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
