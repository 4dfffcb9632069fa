package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/orchestrator/study"
	"github.com/hindsearch/hindsearch/results"
)

func newAblateCmd(e *env) *cobra.Command {
	var rf recipeFlags
	var wf watchFlags
	var only []string
	var overwrite, resume bool
	format := "table"
	cmd := &cobra.Command{
		Use:   "ablate RECIPE",
		Short: "Run a recipe and each of its named variants, then print the comparison table",
		Long: `Run the base recipe and every variant listed under its variants: key (each a
list of key=value overrides), one after the other, each into
<output.dir>/<variant>, then print one row per variant: EM per dataset and
the average at its last evaluation. --resume continues an interrupted
ablation: finished variants are kept, the others continue from their last
checkpoint or start again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(results.Formats(), format) {
				return fmt.Errorf("--format %q: want one of %s", format, strings.Join(results.Formats(), ", "))
			}
			vs, err := study.Variants(args[0], rf.sets, e.environ, only)
			if err != nil {
				return err
			}
			wa, err := wf.start(e)
			if err != nil {
				return err
			}
			defer wa.Close()
			_, err = study.Ablate(cmd.Context(), vs, study.AblateOptions{Environ: e.environ, Overwrite: overwrite, Resume: resume,
				Out: wa.out, Log: e.stderr, Format: format, Metrics: wa.metrics, Progress: wa.progress})
			return err
		},
	}
	rf.register(cmd.Flags())
	wf.register(cmd.Flags())
	cmd.Flags().StringSliceVar(&only, "only", nil, "run only these variants (comma-separated; the base always runs)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace earlier results in the variants' output directories")
	cmd.Flags().BoolVar(&resume, "resume", false, "keep the variants that finished, continue the others from their last checkpoint (or start them again when they have none)")
	cmd.Flags().StringVar(&format, "format", format, "table, markdown or csv")
	cmd.MarkFlagsMutuallyExclusive("overwrite", "resume")
	return cmd
}
