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
	if err := PlotStudyCurves(path, "study", "held-out EM (%)", curves); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("not a PNG: %v", err)
	}
	if err := PlotStudyCurves(path, "study", "held-out EM (%)", nil); err == nil {
		t.Error("no curves: no error")
	}
}

// A run's reward AUC is the mean of reward_mean over steps 1..n, a step's
// last record counting; a gap or no steps is an error.
func TestRewardAUC(t *testing.T) {
	recs := func(rewards ...float64) []StepRecord {
		var out []StepRecord
		for i, r := range rewards {
			out = append(out, StepRecord{Step: i + 1, RewardMean: r})
		}
		return out
	}
	for _, c := range []struct {
		name  string
		steps []StepRecord
		auc   float64
		n     int
		err   string
	}{
		{"four steps", recs(0.125, 0.25, 0.375, 0.5), 0.3125, 4, ""},
		{"one step", recs(0.5), 0.5, 1, ""},
		{"out of order", []StepRecord{{Step: 2, RewardMean: 1}, {Step: 1, RewardMean: 0}}, 0.5, 2, ""},
		// A step recorded twice (a resumed run's): the last record.
		{"a step twice", append(recs(0.25, 0.75), StepRecord{Step: 2, RewardMean: 0.25}), 0.25, 2, ""},
		{"a gap", []StepRecord{{Step: 1}, {Step: 3}}, 0, 0, "step 2 of 1..3 is not recorded"},
		{"no steps", nil, 0, 0, "no training steps recorded"},
	} {
		auc, n, err := RewardAUC(c.steps)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || auc != c.auc || n != c.n {
			t.Errorf("%s: RewardAUC = %v, %d, %v; want %v, %d", c.name, auc, n, err, c.auc, c.n)
		}
	}
}

// A reward_auc study's table has the t and the bootstrap interval, its
// csv both; its caption says what the metric and the intervals are.
func TestStudyTableRewardAUC(t *testing.T) {
	s := Study{Base: "grpo", Metric: "reward_auc", Interval: IntervalSeeds, TInterval: IntervalT, Resamples: 10000, BootstrapSeed: 15,
		Rows: []StudyRow{{Variant: "grpo", IsBase: true, Seeds: []int64{1, 2}, Mean: 0.1, SD: 0.01, Step: 24},
			{Variant: "hindsight", Seeds: []int64{1, 2}, Mean: 0.15, SD: 0.02, Diff: 0.05, CI: [2]float64{0.04, 0.06},
				TCI: &[2]float64{-0.01, 0.11}, Step: 24}}}
	for format, want := range map[string]string{
		"table":    "hindsight  2      24     15.0        2.0  5.0           [-1.0, 11.0]  [4.0, 6.0]",
		"markdown": "| hindsight | 2 | 24 | 15.0 | 2.0 | 5.0 | [-1.0, 11.0] | [4.0, 6.0] |",
		"csv":      "variant,seeds,steps,reward_auc,sd,diff,t_lo,t_hi,ci_lo,ci_hi\ngrpo,2,24,10.0,1.0,0.0,,,0.0,0.0\nhindsight,2,24,15.0,2.0,5.0,-1.0,11.0,4.0,6.0\n",
	} {
		var b bytes.Buffer
		if err := StudyTable(&b, s, format); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), want) {
			t.Errorf("%s:\n%s\nlacks %q", format, b.String(), want)
		}
		if format != "csv" && (!strings.Contains(b.String(), "Training reward AUC (%)") || !strings.Contains(b.String(), "95% Student t interval")) {
			t.Errorf("%s: caption:\n%s", format, b.String())
		}
	}
}
