package jsonscan

import (
	"math"
	"strconv"
	"testing"
)

// The scanner reads every number as strconv.ParseFloat does.
func TestScannerFloat(t *testing.T) {
	for _, n := range []string{"0", "-0", "1", "-0.123456789012345", "-0.6931471805599453", "-0.69314718055994531", "1e22", "1e23", "123e-22",
		"4503599627370495", "4503599627370496", "9007199254740993", "-1.5e-3", "0.000001", "1E+2", "2.5e-300", "1e400", "-1e-400", "0.1", "100000000000000000000000"} {
		checkFloat(t, n)
	}
}

func checkFloat(t *testing.T, n string) {
	t.Helper()
	want, werr := strconv.ParseFloat(n, 64)
	s := New([]byte(n))
	got, ok := s.Float()
	if ok != (werr == nil) || ok && math.Float64bits(got) != math.Float64bits(want) {
		t.Fatalf("%s: scanner %v %v, strconv %v %v", n, got, ok, want, werr)
	}
}

func FuzzScannerFloat(f *testing.F) {
	f.Add(uint64(123456789), int8(-9), true)
	f.Add(uint64(1)<<52-1, int8(22), false)
	f.Fuzz(func(t *testing.T, mant uint64, exp int8, neg bool) {
		n := strconv.FormatUint(mant, 10)
		if neg {
			n = "-" + n
		}
		if exp < 0 && int(-exp) < len(n)-1 {
			// A decimal point inside the digits.
			k := len(n) + int(exp)
			if k > 0 && n[k-1] != '-' {
				n = n[:k] + "." + n[k:]
			}
		} else if exp != 0 {
			n += "e" + strconv.Itoa(int(exp))
		}
		if _, _, ok := (&Scanner{b: []byte(n)}).Number(); !ok {
			return
		}
		checkFloat(t, n)
	})
}
