package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/results"
)

// resultsFlags are the flags of the results subcommand.
type resultsFlags struct {
	phases    bool
	health    bool
	format    string
	byStep    bool
	plot      string
	reference string
	ciIters   int
}

func newResultsCmd(e *env) *cobra.Command {
	var f resultsFlags
	cmd := &cobra.Command{
		Use:   "results RUN_DIR...",
		Short: "Compare the evaluations of runs: EM per dataset with bootstrap confidence intervals, published reference rows, a plot by step",
		Long: `Print the exact match of each run directory's last evaluated step per
strategy (every step with --by-step) side by side, as an ASCII table, a
GitHub markdown table with 95% bootstrap confidence intervals (from the
run's questions/ records), or CSV. --reference search-r1 puts the published
numbers first; --plot writes average EM against training step as a PNG.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runResults(e, f, args)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.format, "format", "table", "output format: "+strings.Join(results.Formats(), ", "))
	fs.BoolVar(&f.byStep, "by-step", false, "one row per evaluated step instead of the last step of each strategy")
	fs.StringVar(&f.plot, "plot", "", "also write a PNG of average EM by training step to this file")
	fs.StringVar(&f.reference, "reference", "", "print the published rows of this reference first: "+strings.Join(results.ReferenceNames(), ", "))
	fs.IntVar(&f.ciIters, "ci-iters", results.DefaultBootstrapIters, "bootstrap resamples for the confidence intervals (0: none)")
	fs.BoolVar(&f.phases, "phases", false, "print each run's per-step timing breakdown (rollout, judge, teacher, train, sync, eval) instead")
	fs.BoolVar(&f.health, "health", false, "print each run's search-agent health per step instead (and draw it: RUN_DIR/"+results.HealthCurvesFile+", or --plot with one run)")
	return cmd
}

func runResults(e *env, f resultsFlags, dirs []string) error {
	if f.phases {
		return runPhases(e, dirs)
	}
	if f.health {
		return runHealth(e, dirs, f.plot)
	}
	if !slices.Contains(results.Formats(), f.format) {
		return fmt.Errorf("results: unknown --format %q (known: %s)", f.format, strings.Join(results.Formats(), ", "))
	}
	if f.ciIters < 0 {
		return fmt.Errorf("results: --ci-iters %d is negative", f.ciIters)
	}
	if len(dirs) == 0 && f.reference == "" {
		return fmt.Errorf("results: give at least one run directory (or --reference)")
	}
	if f.plot != "" && len(dirs) == 0 {
		return fmt.Errorf("results: --plot needs at least one run directory")
	}
	var rows []results.RunSummary
	if f.reference != "" {
		ref, err := results.Reference(f.reference)
		if err != nil {
			return fmt.Errorf("results: %w", err)
		}
		rows = append(rows, ref...)
	}

	names := runNames(dirs)
	opts := results.SummaryOptions{
		ByStep:  f.byStep,
		CIIters: f.ciIters,
		NoCI:    f.ciIters == 0,
		Seed:    results.DefaultBootstrapSeed,
	}
	byRun := map[string][]results.RunSummary{}
	for i, dir := range dirs {
		sums, err := results.SummariseRunWith(dir, opts)
		if err != nil {
			return err
		}
		rename(sums, names[i])
		rows = append(rows, sums...)
		if f.plot != "" {
			if !f.byStep {
				o := opts
				o.ByStep = true
				if sums, err = results.SummariseRunWith(dir, o); err != nil {
					return err
				}
				rename(sums, names[i])
			}
			byRun[names[i]] = sums
		}
	}

	var captions []string
	for _, r := range rows {
		if r.Caption != "" && !slices.Contains(captions, r.Caption) {
			captions = append(captions, r.Caption)
		}
	}
	if err := results.CompareTable(e.stdout, rows, f.format, strings.Join(captions, "\n")); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if f.plot != "" {
		if err := results.PlotAverageEM(f.plot, byRun); err != nil {
			return fmt.Errorf("results: %s: %w", f.plot, err)
		}
		fmt.Fprintf(e.stderr, "results: wrote %s\n", f.plot)
	}
	return nil
}

// runNames labels each run directory by its base name, or by its cleaned
// path where two directories share a base name.
func runNames(dirs []string) []string {
	count := map[string]int{}
	for _, d := range dirs {
		count[filepath.Base(filepath.Clean(d))]++
	}
	names := make([]string, len(dirs))
	for i, d := range dirs {
		names[i] = filepath.Base(filepath.Clean(d))
		if count[names[i]] > 1 {
			names[i] = filepath.Clean(d)
		}
	}
	return names
}

// rename relabels a run's summaries, caption included.
func rename(sums []results.RunSummary, name string) {
	for i := range sums {
		s := &sums[i]
		if s.Name != name {
			if rest, ok := strings.CutPrefix(s.Caption, s.Name+": "); ok {
				s.Caption = name + ": " + rest
			}
			s.Name = name
		}
	}
}

// eachRun reads each run directory's step records and calls per with
// them, a blank line between runs; flag names the option in errors.
func eachRun(e *env, dirs []string, flag string, per func(dir string, steps []results.StepRecord) error) error {
	if len(dirs) == 0 {
		return fmt.Errorf("results %s: give at least one run directory", flag)
	}
	for i, d := range dirs {
		steps, err := (&results.RunDir{Path: d}).ReadSteps()
		if err != nil {
			return fmt.Errorf("results %s: %w", flag, err)
		}
		if len(steps) == 0 {
			return fmt.Errorf("results %s: %s: no steps.jsonl records", flag, d)
		}
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		if err := per(d, steps); err != nil {
			return fmt.Errorf("results %s: %s: %w", flag, d, err)
		}
	}
	return nil
}

// runPhases prints the per-step phase timings of each run directory.
func runPhases(e *env, dirs []string) error {
	return eachRun(e, dirs, "--phases", func(d string, steps []results.StepRecord) error {
		fmt.Fprintf(e.stdout, "%s: seconds per phase and step (phases overlap: each is the time during which that phase had work in flight)\n", d)
		return results.StepsTable(e.stdout, steps)
	})
}

// runHealth prints the search-agent health of each run directory, step by
// step, and draws its curves: into the run directory, or to plot when one
// run is given.
func runHealth(e *env, dirs []string, plot string) error {
	if plot != "" && len(dirs) > 1 {
		return fmt.Errorf("results --health: --plot names one file: give one run directory (each run's curves go to its own %s without it)", results.HealthCurvesFile)
	}
	return eachRun(e, dirs, "--health", func(d string, steps []results.StepRecord) error {
		fmt.Fprintf(e.stdout, "%s: search-agent health per step (rates of turns or searches; truncation causes as shares of trajectories; tokens per trajectory; docs/watching.md)\n", d)
		if err := results.HealthTable(e.stdout, steps); err != nil {
			return err
		}
		path := plot
		if path == "" {
			path = filepath.Join(d, results.HealthCurvesFile)
		}
		if err := results.PlotHealthCurves(path, filepath.Base(filepath.Clean(d)), steps); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "results: wrote %s\n", path)
		return nil
	})
}
