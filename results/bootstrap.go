package results

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
)

// DefaultBootstrapIters is the number of bootstrap resamples used when a
// caller passes zero or fewer.
const DefaultBootstrapIters = 1000

// DefaultBootstrapSeed is the seed SummariseRun resamples with, so that the
// intervals printed for a run are the same every time.
const DefaultBootstrapSeed uint64 = 1

// bootstrapLevel is the coverage of the intervals: 95%.
const bootstrapLevel = 0.95

// newRand returns the PCG generator of seed.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

// BootstrapCI returns the 95% percentile-bootstrap confidence interval of
// the mean of values: values is resampled with replacement iters times
// (DefaultBootstrapIters when iters <= 0) and lo and hi are the 2.5th and
// 97.5th percentiles of the resampled means (linearly interpolated between
// order statistics). The result depends only on values, iters and seed
// (math/rand/v2 PCG). With no values both bounds are NaN; with a constant
// vector lo equals hi (the constant, up to rounding).
func BootstrapCI(values []float64, iters int, seed uint64) (lo, hi float64) {
	if len(values) == 0 {
		return math.NaN(), math.NaN()
	}
	return BootstrapAverageCI(map[string][]float64{"": values}, iters, seed)
}

// BootstrapAverageCI returns the 95% percentile-bootstrap confidence
// interval of the average over datasets of the per-dataset mean, the
// statistic of an "avg" column: in each of iters resamples (DefaultBootstrapIters
// when iters <= 0) every dataset's values are resampled with replacement
// independently, keeping its size, and the statistic is the plain mean of
// the per-dataset means. Datasets with no values are left out; with none at
// all both bounds are NaN. Datasets are visited in sorted order so the
// result depends only on the input, iters and seed.
func BootstrapAverageCI(byDataset map[string][]float64, iters int, seed uint64) (lo, hi float64) {
	var groups [][]float64
	for _, k := range slices.Sorted(maps.Keys(byDataset)) {
		if v := byDataset[k]; len(v) > 0 {
			groups = append(groups, v)
		}
	}
	if len(groups) == 0 {
		return math.NaN(), math.NaN()
	}
	if iters <= 0 {
		iters = DefaultBootstrapIters
	}
	rng := newRand(seed)
	stats := make([]float64, iters)
	for it := range stats {
		var avg float64
		for _, g := range groups {
			avg += resampledMean(rng, g)
		}
		stats[it] = avg / float64(len(groups))
	}
	slices.Sort(stats)
	alpha := (1 - bootstrapLevel) / 2
	return quantile(stats, alpha), quantile(stats, 1-alpha)
}

// resampledMean is the mean of len(xs) draws with replacement from the
// non-empty xs.
func resampledMean(rng *rand.Rand, xs []float64) float64 {
	var sum float64
	for range xs {
		sum += xs[rng.IntN(len(xs))]
	}
	return sum / float64(len(xs))
}

// quantile returns the q-quantile of the sorted, non-empty xs, linearly
// interpolated between order statistics (R's type 7, numpy's default).
func quantile(xs []float64, q float64) float64 {
	h := q * float64(len(xs)-1)
	i := int(math.Floor(h))
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	f := h - float64(i)
	if f == 0 || xs[i] == xs[i+1] {
		return xs[i]
	}
	return xs[i] + f*(xs[i+1]-xs[i])
}
