package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/hindsearch/hindsearch/results"
)

// armResult is what the learning check reads of one finished run.
type armResult struct {
	Name string
	// EM0 and EMLast are the held-out greedy EM (percent) at step 0 and at
	// the last evaluation (step StepLast), over N0 and NLast questions.
	EM0, EMLast   float64
	N0, NLast     int
	StepLast      int
	RewardFirst   float64 // mean sampled reward of the first window steps
	RewardLast    float64 // and of the last window steps
	GoldFirst     float64 // share of trajectories shown the gold passage (health.gold_retrieved_rate), first window steps
	GoldLast      float64 // the same over the last window steps
	Critiques     int
	OPDTokens     int
	Steps         int
	StepSeconds   float64 // mean wall time of a step
	failures      []string
	learnedReward bool
	learnedEM     bool
}

// readArm reads run directory dir: its evaluations, its steps and the
// trajectories it kept.
func readArm(dir string, window int) (*armResult, error) {
	d := &results.RunDir{Path: dir}
	ss, err := d.ReadSteps()
	if err != nil {
		return nil, err
	}
	if len(ss) < 2*window {
		return nil, fmt.Errorf("%s: %d steps recorded, want at least %d (two windows of %d)", dir, len(ss), 2*window, window)
	}
	evals, err := d.ReadEval()
	if err != nil {
		return nil, err
	}
	a := &armResult{Name: filepath.Base(dir), Steps: len(ss), StepLast: -1}
	for _, e := range evals {
		if e.Strategy != results.CurvesStrategy {
			continue
		}
		switch {
		case e.Step == 0:
			a.EM0, a.N0 = 100*e.EM, e.N
		case e.Step > a.StepLast:
			a.EMLast, a.NLast, a.StepLast = 100*e.EM, e.N, e.Step
		}
	}
	if a.N0 == 0 || a.StepLast <= 0 {
		return nil, fmt.Errorf("%s: no search evaluation at step 0 and after it", dir)
	}
	mean := func(from, to int, f func(results.StepRecord) float64) float64 {
		s := 0.0
		for _, r := range ss[from:to] {
			s += f(r)
		}
		return s / float64(to-from)
	}
	reward := func(r results.StepRecord) float64 { return r.RewardMean }
	a.RewardFirst, a.RewardLast = mean(0, window, reward), mean(len(ss)-window, len(ss), reward)
	wall := 0.0
	for _, r := range ss {
		a.Critiques += r.Critiques
		a.OPDTokens += r.OPDTokens
		wall += r.WallSeconds
	}
	a.StepSeconds = wall / float64(len(ss))
	// The steps' own records, over all their trajectories: kept
	// trajectory files are thinned as a run goes (output.trajectory_steps).
	hits := func(from, to int) (float64, error) {
		sum := 0.0
		for _, r := range ss[from:to] {
			if r.Health == nil || r.Health.GoldRetrievedRate == nil {
				return 0, fmt.Errorf("%s: step %d has no health.gold_retrieved_rate", dir, r.Step)
			}
			sum += *r.Health.GoldRetrievedRate
		}
		return sum / float64(to-from), nil
	}
	if a.GoldFirst, err = hits(0, window); err != nil {
		return nil, err
	}
	if a.GoldLast, err = hits(len(ss)-window, len(ss)); err != nil {
		return nil, err
	}
	return a, nil
}

// judge holds a against the margins: held-out EM up by minEM points on at
// least minN questions at both ends, sampled reward up by minReward.
func (a *armResult) judge(minEM, minReward float64, minN int) {
	if a.N0 < minN || a.NLast < minN {
		a.failures = append(a.failures, fmt.Sprintf("evaluated on %d and %d questions, want at least %d", a.N0, a.NLast, minN))
	}
	if d := a.EMLast - a.EM0; d >= minEM {
		a.learnedEM = true
	} else {
		a.failures = append(a.failures, fmt.Sprintf("held-out EM rose %.1f points (%.1f -> %.1f), want %.0f", d, a.EM0, a.EMLast, minEM))
	}
	if d := a.RewardLast - a.RewardFirst; d >= minReward {
		a.learnedReward = true
	} else {
		a.failures = append(a.failures, fmt.Sprintf("sampled reward rose %.3f (%.3f -> %.3f), want %.2f", d, a.RewardFirst, a.RewardLast, minReward))
	}
}

// runCheck is `learn check`: it reads each run directory, prints one row
// per arm and fails unless every arm learned.
func runCheck(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	minEM := fs.Float64("min-em", 20, "least rise of held-out greedy EM, in points, from step 0 to the last evaluation")
	minReward := fs.Float64("min-reward", 0.2, "least rise of the mean sampled reward, last window steps over the first")
	minN := fs.Int("min-questions", 200, "least held-out questions an evaluation must have")
	window := fs.Int("window", 5, "steps averaged at each end of the reward and search-hit curves")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("check: name the run directories of the arms")
	}
	var arms []*armResult
	for _, dir := range fs.Args() {
		a, err := readArm(dir, *window)
		if err != nil {
			return err
		}
		a.judge(*minEM, *minReward, *minN)
		arms = append(arms, a)
	}
	fmt.Fprintln(w, "Real policy (vLLM for the CPU) and trainer (SkyRL, JAX, LoRA); judge SIMULATED (the embedded gold-passage judge).")
	t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleASCII)})))
	t.Header([]string{"arm", "held-out EM step 0", "last (step)", "rise", "reward first 5", "last 5", "rise",
		"gold retrieved first 5", "last 5", "critiques", "OPD tokens", "s/step", "learned"})
	for _, a := range arms {
		verdict := "yes"
		if len(a.failures) > 0 {
			verdict = "NO"
		}
		if err := t.Append([]string{a.Name, fmt.Sprintf("%.1f (n=%d)", a.EM0, a.N0), fmt.Sprintf("%.1f (%d)", a.EMLast, a.StepLast),
			fmt.Sprintf("%+.1f", a.EMLast-a.EM0), fmt.Sprintf("%.3f", a.RewardFirst), fmt.Sprintf("%.3f", a.RewardLast),
			fmt.Sprintf("%+.3f", a.RewardLast-a.RewardFirst), fmt.Sprintf("%.2f", a.GoldFirst), fmt.Sprintf("%.2f", a.GoldLast),
			fmt.Sprint(a.Critiques), fmt.Sprint(a.OPDTokens), fmt.Sprintf("%.1f", a.StepSeconds), verdict}); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	var bad []string
	for _, a := range arms {
		for _, f := range a.failures {
			bad = append(bad, a.Name+": "+f)
		}
	}
	if len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(w, "did not learn: "+b)
		}
		return fmt.Errorf("check: %d of %d arms did not learn", countFailed(arms), len(arms))
	}
	fmt.Fprintf(w, "every arm learned: held-out EM +%.0f points or more, sampled reward +%.2f or more\n", *minEM, *minReward)
	return nil
}

func countFailed(arms []*armResult) int {
	return len(slices.DeleteFunc(slices.Clone(arms), func(a *armResult) bool { return len(a.failures) == 0 }))
}
