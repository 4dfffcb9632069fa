package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/orchestrator/tracking"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

func newTrackCmd(e *env) *cobra.Command {
	var sets []string
	var flush time.Duration
	cmd := &cobra.Command{
		Use:   "track RUN_DIR",
		Short: "Send a run directory's records to the trackers (TensorBoard, W&B offline, MLflow) as new tracker runs",
		Long: `Send what a run directory holds (steps.jsonl, eval.jsonl, the curves, the
recipe, the results table) to the trackers its saved recipe names, or that
--set names (tracking.tensorboard=true, tracking.wandb.project=P,
tracking.mlflow.tracking_uri=URL): for a run whose trackers were off, or one
that could not reach them. Each tracker gets a new run: TensorBoard a new
event file in RUN_DIR/tensorboard that replaces what older files hold, W&B a
new offline run under RUN_DIR/wandb, MLflow a new run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTrack(e, args[0], sets, flush)
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a key of the saved recipe (repeatable): tracking.* names the trackers")
	cmd.Flags().DurationVar(&flush, "timeout", 10*time.Minute, "how long to wait for the trackers to take everything")
	return cmd
}

func runTrack(e *env, dir string, sets []string, flush time.Duration) error {
	path := filepath.Join(dir, "recipe.yaml")
	y, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("track: %s is not a run directory: %w", dir, err)
	}
	r, err := recipes.Load(path, sets, e.environ)
	if err != nil {
		return fmt.Errorf("track: %w", err)
	}
	rd := &results.RunDir{Path: dir}
	steps, err := rd.ReadSteps()
	if err != nil {
		return fmt.Errorf("track: %w", err)
	}
	evals, err := rd.ReadEval()
	if err != nil {
		return fmt.Errorf("track: %w", err)
	}
	if len(steps) == 0 && len(evals) == 0 {
		return fmt.Errorf("track: %s has no step or evaluation records", dir)
	}
	c := tracking.Config{Recipe: r, RunDir: dir, RecipeYAML: y, Out: e.stderr, Start: time.Now()}
	for _, s := range steps {
		c.Simulated = c.Simulated || s.Simulated
	}
	if r.Tracking.MLflow.TrackingURI != "" {
		if c.MLflow, err = setup.MLflow(r, e.environ, nil); err != nil {
			return fmt.Errorf("track: %w", err)
		}
	}
	lines, err := tracking.Replay(c, steps, evals, tracking.FinalFiles(dir, evals, r.Name), flush)
	if err != nil {
		return fmt.Errorf("track: %w", err)
	}
	for _, l := range lines {
		fmt.Fprintln(e.stdout, l)
	}
	return nil
}
