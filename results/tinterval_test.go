package results

import (
	"math"
	"testing"
)

// The t quantiles are the printed tables' (three decimals) and, above the
// table, the exact values to six; the normal quantile in the limit.
func TestStudentT975(t *testing.T) {
	for _, c := range []struct {
		df   int
		want float64
		tol  float64
	}{
		{1, 12.706, 5e-4}, {2, 4.303, 5e-4}, {3, 3.182, 5e-4}, {4, 2.776, 5e-4}, {5, 2.571, 5e-4},
		{9, 2.262, 5e-4}, {10, 2.228, 5e-4}, {19, 2.093, 5e-4}, {29, 2.045, 5e-4}, {30, 2.042, 5e-4},
		// Past the table: the expansion against the exact quantiles.
		{31, 2.039513, 1e-6}, {40, 2.021075, 1e-6}, {60, 2.000298, 1e-6}, {120, 1.979930, 1e-6},
		{1000, 1.962339, 1e-6}, {1 << 30, 1.959964, 1e-6},
	} {
		if got := StudentT975(c.df); math.Abs(got-c.want) > c.tol {
			t.Errorf("StudentT975(%d) = %.6f, want %.6f", c.df, got, c.want)
		}
	}
	// Decreasing in df, across the table's end too.
	for df := 1; df < 200; df++ {
		if !(StudentT975(df+1) < StudentT975(df)) {
			t.Errorf("StudentT975(%d) = %v, not below StudentT975(%d) = %v", df+1, StudentT975(df+1), df, StudentT975(df))
		}
	}
	if !math.IsNaN(StudentT975(0)) {
		t.Error("df 0: not NaN")
	}
}

// The interval worked by hand: values 1, 2, 3, 6 have mean 3, sample sd
// sqrt(14/3) and half-width t(0.975, 3) * sd / 2.
func TestTInterval(t *testing.T) {
	m, lo, hi := TInterval([]float64{1, 2, 3, 6})
	h := 3.182446 * math.Sqrt(14.0/3) / 2
	if m != 3 || math.Abs(lo-(3-h)) > 1e-9 || math.Abs(hi-(3+h)) > 1e-9 {
		t.Errorf("TInterval = %v [%v, %v], want 3 [%v, %v]", m, lo, hi, 3-h, 3+h)
	}
	// Equal values: no width.
	if m, lo, hi := TInterval([]float64{0.25, 0.25, 0.25}); m != 0.25 || lo != 0.25 || hi != 0.25 {
		t.Errorf("constant: %v [%v, %v]", m, lo, hi)
	}
	if m, lo, hi := TInterval([]float64{0.5}); m != 0.5 || !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("one value: %v [%v, %v], want 0.5 and no interval", m, lo, hi)
	}
}
