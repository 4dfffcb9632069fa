package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/orchestrator/study"
	"github.com/hindsearch/hindsearch/results"
)

func newStudyCmd(e *env) *cobra.Command {
	var rf recipeFlags
	var wf watchFlags
	var only []string
	var overwrite, resume bool
	var seeds int
	var base, metric string
	var analyse bool
	format := "table"
	cmd := &cobra.Command{
		Use:   "study RECIPE",
		Short: "Run the base and variants of a recipe at several seeds, then print each one's mean metric and paired differences",
		Long: `Run the study base (study.base: the recipe itself, "base", or one of its
variants) and every variant listed under variants: at every seed of
study.seeds (the recipe's seed key), one after the other, each into
<output.dir>/<variant>/seed-<seed>. Then print one row per variant on the
study's metric (study.metric, or --metric):

  em          the held-out EM (study.datasets, pooled over questions) at the
              last evaluation, its mean and standard deviation over seeds,
              and the paired difference to the base with a 95% bootstrap
              interval (10,000 resamples of seeds and, within each seed, of
              questions, the same for the variant and the base; fixed RNG
              seed). The default.
  reward_auc  each run's mean training reward over all its steps (the mean
              of steps.jsonl's reward_mean: the area under the training
              reward curve over the number of steps), its mean and standard
              deviation over seeds, and the paired difference to the base by
              seed with a 95% Student t interval over seeds (n-1 df) and a
              95% bootstrap interval over seeds (10,000 resamples of the
              seeds' differences; fixed RNG seed). Needs 2 seeds or more.

output.dir also receives study.json (the table's numbers, with the metric
and the intervals named) and study-curves.png (band min..max over seeds:
the held-out EM by step for em, the training reward by step for
reward_auc). --resume continues an interrupted study: runs that finished
are kept, the others continue from their last checkpoint (the trainer must
still hold it) or start again when they have none. --analyse runs nothing: it reads the finished runs of the
study and prints and writes the table again, with another --metric say.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format == "text" {
				format = "table"
			}
			if !slices.Contains(results.Formats(), format) {
				return fmt.Errorf("--format %q: want one of %s", format, strings.Join(results.Formats(), ", "))
			}
			if seeds < 0 {
				return fmt.Errorf("--seeds %d: want at least 1", seeds)
			}
			var list []int64
			for s := range seeds {
				list = append(list, int64(s+1))
			}
			plan, err := study.NewPlan(args[0], rf.sets, e.environ, only, list, base, metric)
			if err != nil {
				return err
			}
			if analyse {
				_, err := study.Report(plan, e.stdout, format)
				return err
			}
			wa, err := wf.start(e)
			if err != nil {
				return err
			}
			defer wa.Close()
			_, err = study.Run(cmd.Context(), plan, study.Options{AblateOptions: study.AblateOptions{
				Environ: e.environ, Overwrite: overwrite, Resume: resume, Out: wa.out, Log: e.stderr, Format: format, Metrics: wa.metrics, Progress: wa.progress}})
			return err
		},
	}
	rf.register(cmd.Flags())
	wf.register(cmd.Flags())
	cmd.Flags().StringSliceVar(&only, "only", nil, "run only these variants (comma-separated; the study base always runs)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace earlier results in the runs' output directories")
	cmd.Flags().IntVar(&seeds, "seeds", 0, "run seeds 1..N instead of study.seeds")
	cmd.Flags().StringVar(&base, "base", "", "take the differences against this variant instead of study.base")
	cmd.Flags().StringVar(&format, "format", format, "table (or text), markdown or csv")
	cmd.Flags().StringVar(&metric, "metric", "", "compare on this metric instead of study.metric: em (held-out EM) or reward_auc (mean training reward over the steps)")
	cmd.Flags().BoolVar(&analyse, "analyse", false, "run nothing: read the study's finished runs and print and write its table again")
	cmd.Flags().BoolVar(&resume, "resume", false, "keep the runs that finished, continue the others from their last checkpoint (or start them again when they have none)")
	cmd.MarkFlagsMutuallyExclusive("analyse", "overwrite", "resume")
	return cmd
}
