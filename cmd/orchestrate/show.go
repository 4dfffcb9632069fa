package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/results"
)

// showFlags are the flags of the show subcommand.
type showFlags struct {
	step   int
	failed bool
	id     string
	color  string
	eval   string
}

func newShowCmd(e *env) *cobra.Command {
	var f showFlags
	cmd := &cobra.Command{
		Use:   "show RUN_DIR",
		Short: "Print a run's sampled trajectories turn by turn, with critiques and per-token OPD terms",
		Long: `Print the trajectories a run kept of a training step (trajectories/step-NNNN.jsonl,
output.trajectories per step) turn by turn: the question and gold answers,
each turn's policy text (think, search, answer) with its query and the titles
retrieved, the reward, F1, advantage and finish reason, the judge's critique
(or why there is none) and the on-policy-distillation term of every token.

On a terminal the OPD terms are background colours scaled by value (green
positive, red negative); otherwise runs of tokens sharing a non-zero term are
written ⟦tokens⟧⟨+0.50⟩. The default step is the latest one with trajectories;
--id alone searches every step, latest first.

--eval STRATEGY shows the trajectories an evaluation kept instead
(trajectories/eval-STRATEGY-step-NNNN.jsonl, output.trajectories of them: those
with an invalid or cut turn, a cut observation, a failed or repeated search or
no answer first, then wrong answers), with the evaluation's health per dataset;
--step is then the evaluated step (0: the base model).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShow(e, f, args[0], cmd.Flags().Changed("step"))
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.step, "step", 0, "training step to show (default: the latest with trajectories)")
	fs.BoolVar(&f.failed, "failed", false, "only failed trajectories (reward 0)")
	fs.StringVar(&f.id, "id", "", "only the trajectory with this id")
	fs.StringVar(&f.color, "color", "auto", "colour the output: auto (when writing to a terminal), always or never")
	fs.StringVar(&f.eval, "eval", "", "show an evaluation's kept trajectories (direct, rag or search) instead of a training step's")
	return cmd
}

func runShow(e *env, f showFlags, path string, stepSet bool) error {
	color, err := useColor(f.color, e.stdout, e.environ)
	if err != nil {
		return err
	}
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		return fmt.Errorf("show: %s: no such run directory", path)
	}
	dir := &results.RunDir{Path: path}
	steps, err := dir.TrajectorySteps()
	read := dir.ReadTrajectories
	kind := "trajectories"
	if f.eval != "" {
		if !slices.Contains(format.Strategies, f.eval) {
			return fmt.Errorf("show: --eval %q: want one of %s", f.eval, strings.Join(format.Strategies, ", "))
		}
		steps, err = dir.EvalTrajectorySteps(f.eval)
		read = func(step int) ([]results.TrajectoryRecord, error) { return dir.ReadEvalTrajectories(step, f.eval) }
		kind = f.eval + " evaluation trajectories"
	}
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	if len(steps) == 0 {
		if f.eval != "" {
			return fmt.Errorf("show: %s has no %s (output.trajectories 0, or no %s evaluation has run)", path, kind, f.eval)
		}
		return fmt.Errorf("show: %s has no %s/ files (output.trajectories 0, or no step has finished)", path, results.TrajectoriesDir)
	}

	// The steps to look in: the one asked for, else the latest; with --id
	// and no --step, every step, latest first.
	search := []int{steps[len(steps)-1]}
	switch {
	case stepSet:
		search = []int{f.step}
	case f.id != "":
		search = slices.Clone(steps)
		slices.Reverse(search)
	}
	var (
		step  int
		all   []results.TrajectoryRecord
		shown []results.TrajectoryRecord
	)
	for _, s := range search {
		trajs, err := read(s)
		if err != nil {
			return fmt.Errorf("show: %w", err)
		}
		step, all, shown = s, trajs, nil
		for _, t := range trajs {
			if (f.id == "" || t.ID == f.id) && (!f.failed || t.Failed()) {
				shown = append(shown, t)
			}
		}
		if len(shown) > 0 {
			break
		}
	}
	if len(shown) == 0 {
		var what []string
		if f.id != "" {
			what = append(what, "id "+f.id)
		}
		if f.failed {
			what = append(what, "failed")
		}
		where := fmt.Sprintf("step %d", step)
		if len(search) > 1 {
			where = "steps " + results.StepRanges(steps)
		}
		if len(what) == 0 {
			return fmt.Errorf("show: %s: %s has an empty trajectories file", path, where)
		}
		return fmt.Errorf("show: %s: no trajectory with %s in %s", path, strings.Join(what, " and "), where)
	}

	opts := results.RenderOptions{Color: color}
	var filter string
	if f.failed {
		filter = ", failed only"
	}
	fmt.Fprintf(e.stdout, "%s step %d: %d of %d kept %s%s (steps with %s: %s)\n",
		path, step, len(shown), len(all), kind, filter, kind, results.StepRanges(steps))
	if f.eval != "" {
		if recs, err := dir.ReadEval(); err == nil {
			for _, rec := range recs {
				if rec.Step == step && rec.Strategy == f.eval && rec.Health != nil {
					fmt.Fprintf(e.stdout, "%s %s\n", rec.Dataset, results.HealthLine(rec.Health))
				}
			}
		}
	} else if recs, err := dir.ReadSteps(); err == nil {
		for _, rec := range recs {
			if rec.Step == step && rec.Health != nil {
				fmt.Fprintln(e.stdout, results.HealthLine(rec.Health))
			}
		}
	}
	if err := results.RenderLegend(e.stdout, opts); err != nil {
		return err
	}
	for i := range shown {
		fmt.Fprintln(e.stdout)
		if err := results.RenderTrajectory(e.stdout, &shown[i], opts); err != nil {
			return err
		}
	}
	return nil
}

// useColor decides whether to colour output written to w: "always",
// "never", or "auto": when w is a terminal (a character device) and the
// environment sets neither NO_COLOR nor TERM=dumb.
func useColor(mode string, w io.Writer, environ []string) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto":
	default:
		return false, fmt.Errorf("show: --color %q: want auto, always or never", mode)
	}
	for _, kv := range environ {
		if k, v, _ := strings.Cut(kv, "="); (k == "NO_COLOR" && v != "") || (k == "TERM" && v == "dumb") {
			return false, nil
		}
	}
	f, ok := w.(*os.File)
	if !ok {
		return false, nil
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0, nil
}
