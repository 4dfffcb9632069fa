package results

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// paired returns a seed of n questions where the variant is right on the
// first v and the base on the first b.
func paired(n, v, b int) PairedRun { return PairedRun{Variant: coin(n, v), Base: coin(n, b)} }

func TestPairedBootstrapDiffExcludesZero(t *testing.T) {
	// Three seeds of 100 questions: the variant gets 20 more right than the
	// base at every seed.
	runs := []PairedRun{paired(100, 40, 20), paired(100, 45, 25), paired(100, 35, 15)}
	d, lo, hi, err := PairedBootstrapDiff(runs, 0, StudyBootstrapSeed)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(d-0.20) > 1e-12 {
		t.Errorf("diff %v, want 0.20", d)
	}
	if !(lo > 0 && lo < d && d < hi && hi < 0.3) {
		t.Errorf("interval [%v, %v] should lie above 0 around 0.20", lo, hi)
	}
	// Reproducible.
	_, lo2, hi2, _ := PairedBootstrapDiff(runs, 0, StudyBootstrapSeed)
	if lo2 != lo || hi2 != hi {
		t.Errorf("second call [%v, %v], first [%v, %v]", lo2, hi2, lo, hi)
	}
}

func TestPairedBootstrapDiffIncludesZero(t *testing.T) {
	// The variant wins 3 questions at one seed and loses 3 at another; the
	// pairs disagree on 6 of 50 questions at the third.
	runs := []PairedRun{paired(50, 23, 20), paired(50, 20, 23), {Variant: coin(50, 28), Base: append(coin(6, 0), coin(44, 22)...)}}
	d, lo, hi, err := PairedBootstrapDiff(runs, 0, StudyBootstrapSeed)
	if err != nil {
		t.Fatal(err)
	}
	if !(lo < 0 && 0 < hi && lo <= d && d <= hi) {
		t.Errorf("diff %v interval [%v, %v] should contain 0", d, lo, hi)
	}
}

func TestPairedBootstrapDiffIdenticalRunsIsZeroWidth(t *testing.T) {
	r := coin(30, 11)
	d, lo, hi, err := PairedBootstrapDiff([]PairedRun{{r, r}, {r, r}}, 100, 1)
	if err != nil || d != 0 || lo != 0 || hi != 0 {
		t.Errorf("identical runs: %v [%v, %v] %v", d, lo, hi, err)
	}
	if d, _, _, _ := PairedBootstrapDiff(nil, 0, 1); !math.IsNaN(d) {
		t.Errorf("no runs: diff %v, want NaN", d)
	}
	if _, _, _, err := PairedBootstrapDiff([]PairedRun{{coin(2, 1), coin(3, 1)}}, 0, 1); err == nil {
		t.Error("unequal lengths: no error")
	}
}

func TestPooledEMWeightsByQuestions(t *testing.T) {
	evals := []EvalRecord{
		{Step: 8, Strategy: "search", Dataset: "hotpotqa", N: 100, EM: 0.2},
		{Step: 8, Strategy: "search", Dataset: "musique", N: 50, EM: 0.05},
		{Step: 8, Strategy: "search", Dataset: "nq", N: 100, EM: 0.9},
		{Step: 8, Strategy: "greedy", Dataset: "hotpotqa", N: 100, EM: 0.9},
		{Step: 16, Strategy: "search", Dataset: "hotpotqa", N: 100, EM: 0.3},
	}
	steps, em := PooledEM(evals, "search", []string{"hotpotqa", "musique"})
	if len(steps) != 1 || steps[0] != 8 || math.Abs(em[0]-0.15) > 1e-12 {
		t.Errorf("PooledEM = %v %v, want [8] [0.15]", steps, em)
	}
}

func TestStudyTableFormats(t *testing.T) {
	s := Study{Base: "grpo", Datasets: []string{"hotpotqa"}, Strategy: "search", Resamples: 10000, BootstrapSeed: 15,
		Rows: []StudyRow{{Variant: "grpo", IsBase: true, Seeds: []int64{1, 2}, Mean: 0.1, SD: 0.01, Step: 24},
			{Variant: "hindsight", Switches: "hindsight.enabled=true", Seeds: []int64{1, 2}, Mean: 0.15, SD: 0.02, Diff: 0.05, CI: [2]float64{0.01, 0.09}, Step: 24}}}
	for format, want := range map[string]string{
		"table":    "hindsight  2      24    15.0  2.0  5.0           [1.0, 9.0]",
		"markdown": "| hindsight | 2 | 24 | 15.0 | 2.0 | 5.0 | [1.0, 9.0] |",
		"csv":      "hindsight,2,24,15.0,2.0,5.0,1.0,9.0",
	} {
		var b bytes.Buffer
		if err := StudyTable(&b, s, format); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), want) {
			t.Errorf("%s:\n%s\nlacks %q", format, b.String(), want)
		}
	}
	if err := StudyTable(&bytes.Buffer{}, s, "html"); err == nil {
		t.Error("html: no error")
	}
}

func TestPlotStudyCurvesWritesPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), StudyCurvesFile)
	curves := []StudyCurve{
		{Label: "grpo", Steps: []int{0, 8, 16}, Mean: []float64{0.05, 0.08, 0.1}, Min: []float64{0.04, 0.06, 0.08}, Max: []float64{0.06, 0.1, 0.12}},
		{Label: "hindsight", Steps: []int{0, 8, 16}, Mean: []float64{0.05, 0.1, 0.15}, Min: []float64{0.04, 0.08, 0.12}, Max: []float64{0.06, 0.12, 0.18}},
	}
	if err := PlotStudyCurves(path, "study", curves); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("not a PNG: %v", err)
	}
	if err := PlotStudyCurves(path, "study", nil); err == nil {
		t.Error("no curves: no error")
	}
}
