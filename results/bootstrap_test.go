package results

import (
	"math"
	"testing"
)

// coin returns n values, the first k of them 1 and the rest 0.
func coin(n, k int) []float64 {
	v := make([]float64, n)
	for i := range k {
		v[i] = 1
	}
	return v
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func TestBootstrapCIDeterministic(t *testing.T) {
	v := coin(200, 70)
	lo1, hi1 := BootstrapCI(v, 500, 7)
	lo2, hi2 := BootstrapCI(v, 500, 7)
	if lo1 != lo2 || hi1 != hi2 {
		t.Errorf("same seed: [%v, %v] then [%v, %v]", lo1, hi1, lo2, hi2)
	}
	lo3, hi3 := BootstrapCI(v, 500, 8)
	if lo1 == lo3 && hi1 == hi3 {
		t.Errorf("seeds 7 and 8 gave the same interval [%v, %v]", lo1, hi1)
	}
}

func TestBootstrapCIContainsMean(t *testing.T) {
	for _, k := range []int{1, 10, 50, 99} {
		v := coin(100, k)
		m := mean(v)
		lo, hi := BootstrapCI(v, 0, 1)
		if !(lo <= m && m <= hi && lo < hi) {
			t.Errorf("k=%d: [%v, %v] does not contain the mean %v", k, lo, hi, m)
		}
		// The binomial standard error is sqrt(p(1-p)/n); a 95% interval is
		// about 4 of them wide.
		se := math.Sqrt(m * (1 - m) / 100)
		if w := hi - lo; w < 2.5*se || w > 5.5*se {
			t.Errorf("k=%d: width %v, want about %v", k, w, 3.92*se)
		}
	}
}

func TestBootstrapCIDegenerate(t *testing.T) {
	for _, c := range []float64{0, 1, 0.25} {
		lo, hi := BootstrapCI([]float64{c, c, c, c, c}, 100, 3)
		if lo != hi || math.Abs(lo-c) > 1e-12 {
			t.Errorf("constant %v: [%v, %v]", c, lo, hi)
		}
	}
	if lo, hi := BootstrapCI(nil, 100, 3); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("no values: [%v, %v], want NaN", lo, hi)
	}
}

func TestBootstrapCIShrinks(t *testing.T) {
	lo1, hi1 := BootstrapCI(coin(100, 40), 1000, 1)
	lo2, hi2 := BootstrapCI(coin(1600, 640), 1000, 1)
	// Sixteen times the samples: a quarter of the width.
	if r := (hi2 - lo2) / (hi1 - lo1); r < 0.15 || r > 0.35 {
		t.Errorf("width %v with 100 samples, %v with 1600: ratio %v, want about 0.25", hi1-lo1, hi2-lo2, r)
	}
}

func TestBootstrapAverageCI(t *testing.T) {
	by := map[string][]float64{
		"nq":       coin(400, 160), // .4
		"hotpotqa": coin(100, 20),  // .2
		"empty":    nil,            // left out
	}
	avg := (0.4 + 0.2) / 2 // the mean of means, not the pooled mean .36
	lo, hi := BootstrapAverageCI(by, 1000, 5)
	if !(lo < avg && avg < hi) {
		t.Errorf("[%v, %v] does not contain the average %v", lo, hi, avg)
	}
	if math.Abs((lo+hi)/2-avg) > 0.02 {
		t.Errorf("[%v, %v] not centred on %v", lo, hi, avg)
	}
	// The variance of a mean of two independent means is a quarter of the
	// sum of their variances.
	se := math.Sqrt(.4*.6/400+.2*.8/100) / 2
	if w := hi - lo; w < 2.5*se || w > 5.5*se {
		t.Errorf("width %v, want about %v", w, 3.92*se)
	}
	if lo2, hi2 := BootstrapAverageCI(by, 1000, 5); lo2 != lo || hi2 != hi {
		t.Errorf("not deterministic: [%v, %v] then [%v, %v]", lo, hi, lo2, hi2)
	}
	// One dataset: the same as BootstrapCI.
	l1, h1 := BootstrapAverageCI(map[string][]float64{"nq": by["nq"]}, 300, 9)
	l2, h2 := BootstrapCI(by["nq"], 300, 9)
	if l1 != l2 || h1 != h2 {
		t.Errorf("one dataset: [%v, %v], BootstrapCI [%v, %v]", l1, h1, l2, h2)
	}
	// Constant datasets: degenerate at the mean of the constants.
	l, h := BootstrapAverageCI(map[string][]float64{"a": {1, 1}, "b": {0, 0, 0}}, 100, 1)
	if l != h || math.Abs(l-0.5) > 1e-12 {
		t.Errorf("constants: [%v, %v], want [0.5, 0.5]", l, h)
	}
	if l, h := BootstrapAverageCI(map[string][]float64{"x": nil}, 100, 1); !math.IsNaN(l) || !math.IsNaN(h) {
		t.Errorf("no values: [%v, %v], want NaN", l, h)
	}
}
