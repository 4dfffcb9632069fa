package results

import "math"

// t975 are the 0.975 quantiles of Student's t distribution for 1 to 30
// degrees of freedom (t975[df-1]), to six decimals: computed from the
// regularised incomplete beta function, and equal to the printed tables'
// three decimals (12.706, 4.303, 3.182, 2.776, ..., 2.042).
var t975 = [30]float64{
	12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
	2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
	2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
}

// z975 is the standard normal distribution's 0.975 quantile.
const z975 = 1.959963984540054

// StudentT975 returns the 0.975 quantile of Student's t distribution with
// df degrees of freedom, the factor of a two-sided 95% t interval: from a
// table for df 1 to 30, and above 30 from the Cornish-Fisher expansion of
// the quantile about the normal one to the fourth power of 1/df (within
// 1e-7 of the exact value there, and tending to 1.959964). NaN for df < 1.
func StudentT975(df int) float64 {
	switch {
	case df < 1:
		return math.NaN()
	case df <= len(t975):
		return t975[df-1]
	}
	z, z2, nu := z975, z975*z975, float64(df)
	g1 := (z2 + 1) * z / 4
	g2 := ((5*z2+16)*z2 + 3) * z / 96
	g3 := (((3*z2+19)*z2+17)*z2 - 15) * z / 384
	g4 := ((((79*z2+776)*z2+1482)*z2-1920)*z2 - 945) * z / 92160
	return z + g1/nu + g2/(nu*nu) + g3/(nu*nu*nu) + g4/(nu*nu*nu*nu)
}

// TInterval returns the mean of xs and its two-sided 95% Student t
// confidence interval, mean -/+ StudentT975(n-1) * sd / sqrt(n), sd the
// sample standard deviation (MeanSD) of the n values. With fewer than two
// values lo and hi are NaN (and the mean too with none).
func TInterval(xs []float64) (mean, lo, hi float64) {
	mean, sd := MeanSD(xs)
	if len(xs) < 2 {
		return mean, math.NaN(), math.NaN()
	}
	h := StudentT975(len(xs)-1) * sd / math.Sqrt(float64(len(xs)))
	return mean, mean - h, mean + h
}
