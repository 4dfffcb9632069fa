// Package study runs a recipe's variants against each other: an ablation
// (Ablate: the base recipe and every variant once, one results row each)
// and a study (Run: every arm at several seeds, then Report and Analyse:
// paired differences to the base on study.metric, the held-out EM with
// bootstrap intervals over seeds and questions, or the mean training
// reward with t and bootstrap intervals over seeds).
package study

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hindsearch/hindsearch/orchestrator"
	"github.com/hindsearch/hindsearch/orchestrator/metrics"
	"github.com/hindsearch/hindsearch/orchestrator/progress"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// BaseVariant names the unmodified recipe among an ablation's runs.
const BaseVariant = "base"

// Variant is one run of an ablation: a name and its resolved recipe.
type Variant struct {
	Name   string
	Recipe *recipes.Recipe
	// Skip, when set, is why the variant cannot run: the command line's
	// --set overrides clash with its own (it is valid without them), e.g.
	// hindsight.teacher=initial under --set sync.kind=sglang_disk. Recipe
	// is nil then. Ablate reports it and runs the others; a study refuses
	// it.
	Skip string
}

// Variants resolves the base recipe at path and each of its variants (the
// base's --set overrides first, then the variant's), each with its own
// output directory <output.dir>/<variant> unless the variant sets
// output.dir itself. only, when non-empty, selects variants by name (the
// base always runs). Errors name the variant.
func Variants(path string, sets, environ, only []string) ([]Variant, error) {
	base, err := recipes.Load(path, sets, environ)
	if err != nil {
		return nil, err
	}
	names := slices.Sorted(maps.Keys(base.Variants))
	for _, o := range only {
		if o != BaseVariant && !slices.Contains(names, o) {
			return nil, fmt.Errorf("--only %s: the recipe has no such variant (it has %v)", o, names)
		}
	}
	root := base.Output.Dir
	out := []Variant{{Name: BaseVariant, Recipe: base}}
	base.Output.Dir = filepath.Join(root, BaseVariant)
	for _, name := range names {
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		over := base.Variants[name]
		r, err := recipes.Load(path, append(slices.Clone(sets), over...), environ)
		if err != nil {
			var ps recipes.Problems
			if len(sets) > 0 && errors.As(err, &ps) {
				// Valid on its own: the command line's overrides make it
				// impossible, not the recipe.
				if _, alone := recipes.Load(path, over, environ); alone == nil {
					out = append(out, Variant{Name: name, Skip: fmt.Sprintf("the command line's --set clash with it: %v", err)})
					continue
				}
			}
			return nil, fmt.Errorf("variant %s: %w", name, err)
		}
		setsDir := false
		for _, o := range over {
			if len(o) >= len("output.dir=") && o[:len("output.dir=")] == "output.dir=" {
				setsDir = true
			}
		}
		if !setsDir {
			r.Output.Dir = filepath.Join(root, name)
		}
		out = append(out, Variant{Name: name, Recipe: r})
	}
	for _, v := range out {
		if v.Skip != "" {
			continue
		}
		if err := setup.ApplyRunDefaults(v.Recipe); err != nil {
			return nil, fmt.Errorf("variant %s: %w", v.Name, err)
		}
	}
	return out, nil
}

// AblateOptions configure Ablate.
type AblateOptions struct {
	// Environ is where API keys are read from.
	Environ []string
	// Overwrite replaces earlier results in the variants' directories.
	Overwrite bool
	// Resume continues an interrupted ablation or study: a run whose
	// directory holds a finished run (its resume point at train.steps) is
	// kept and not run again, one with an earlier resume point continues
	// from it (orchestrator.Runner.Resume: the trainer must still hold
	// that checkpoint), and one with none starts afresh, replacing any
	// records it left before its first checkpoint. Exclusive with
	// Overwrite.
	Resume bool
	// Out receives the runs' lines and the comparison table; Log start-up
	// messages such as the index build's.
	Out, Log io.Writer
	// Format is the comparison table's format (table, markdown or csv).
	Format string
	// Metrics and Progress, when set, watch every variant's run.
	Metrics  *metrics.Metrics
	Progress *progress.Reporter
}

// Ablate runs every variant in turn against its own embedded or remote
// servers and prints the comparison of their last evaluations.
func Ablate(ctx context.Context, vs []Variant, opt AblateOptions) ([]results.RunSummary, error) {
	out := opt.Out
	if out == nil {
		out = io.Discard
	}
	var rows []results.RunSummary
	for i, v := range vs {
		if v.Skip != "" {
			fmt.Fprintf(out, "\n== variant %d/%d: %s SKIPPED: %s\n", i+1, len(vs), v.Name, v.Skip)
			continue
		}
		fmt.Fprintf(out, "\n== variant %d/%d: %s (%s)\n", i+1, len(vs), v.Name, v.Recipe.Switches())
		if err := runVariant(ctx, v, out, opt); err != nil {
			return rows, fmt.Errorf("variant %s: %w", v.Name, err)
		}
		sums, err := results.SummariseRun(v.Recipe.Output.Dir, false)
		if err != nil {
			return rows, fmt.Errorf("variant %s: %w", v.Name, err)
		}
		for _, s := range sums {
			s.Name = v.Name
			rows = append(rows, s)
		}
	}
	fmt.Fprintln(out)
	caption := "EM (%) at the last evaluation of each variant."
	training := ""
	for _, v := range vs {
		if v.Skip != "" {
			caption += fmt.Sprintf("\n  %s: SKIPPED (%s)", v.Name, v.Skip)
			continue
		}
		caption += fmt.Sprintf("\n  %s: %s", v.Name, v.Recipe.Switches())
		// The training of the first variant is said once; a variant that
		// trains otherwise says its own.
		if o := v.Recipe.Optimisation(); training == "" {
			training = o
			caption = strings.Replace(caption, "of each variant.", "of each variant. Training: "+o+".", 1)
		} else if o != training {
			caption += "; training: " + o
		}
	}
	return rows, results.CompareTable(out, rows, opt.Format, caption)
}

// runVariant runs v's recipe against its own embedded or remote servers,
// its lines to out; with opt.Resume it keeps, continues or restarts the
// run already in v's directory (AblateOptions.Resume).
func runVariant(ctx context.Context, v Variant, out io.Writer, opt AblateOptions) error {
	rn := &orchestrator.Runner{Recipe: v.Recipe, Out: out, Overwrite: opt.Overwrite, Metrics: opt.Metrics, Progress: opt.Progress}
	if opt.Resume {
		dir := v.Recipe.Output.Dir
		step, ok, err := orchestrator.ResumePoint(dir)
		switch {
		case err != nil:
			return err
		case ok && step >= v.Recipe.Train.Steps:
			fmt.Fprintf(out, "finished earlier: %s holds step %d of %d, kept\n", dir, step, v.Recipe.Train.Steps)
			return nil
		case ok:
			rn.Resume = true // the run says "resuming DIR after step N"
		default:
			// Records from before a first checkpoint cannot be continued.
			if _, err := os.Stat(filepath.Join(dir, results.StepsFile)); err == nil {
				fmt.Fprintf(out, "no resume point in %s (stopped before its first checkpoint): starting it again\n", dir)
			}
			rn.Overwrite = true
		}
	}
	deps, emb, err := setup.Connect(ctx, v.Recipe, opt.Environ, opt.Log, setup.WithMetrics(opt.Metrics), setup.WithProgress(opt.Progress))
	if err != nil {
		return err
	}
	defer emb.Close()
	rn.Deps = deps
	_, err = rn.Run(ctx)
	return err
}
