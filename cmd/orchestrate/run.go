package main

import (
	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/orchestrator"
)

func newRunCmd(e *env) *cobra.Command {
	var rf recipeFlags
	var wf watchFlags
	var overwrite, resume bool
	cmd := &cobra.Command{
		Use:   "run RECIPE",
		Short: "Run the training loop of a recipe and print the results table",
		Long: `Run the HindSearch training loop described by RECIPE: evaluate, then for each
step roll out, critique failed trajectories, train, sync weights, and evaluate
every eval.every steps. Roles whose URL is "embedded" run in this process on
loopback ports (policy, judge and trainer by the simulator, the retriever as a
real BM25 index).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			wa, err := wf.start(e)
			if err != nil {
				return err
			}
			defer wa.Close()
			r, deps, emb, err := rf.connect(cmd.Context(), e, args[0], wa.options()...)
			if err != nil {
				return err
			}
			defer emb.Close()
			rn := &orchestrator.Runner{Recipe: r, Deps: deps, Out: wa.out, Overwrite: overwrite, Resume: resume,
				Metrics: wa.metrics, Progress: wa.progress}
			_, err = rn.Run(cmd.Context())
			return err
		},
	}
	rf.register(cmd.Flags())
	wf.register(cmd.Flags())
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace the results of an earlier run in output.dir")
	cmd.Flags().BoolVar(&resume, "resume", false, "continue the run in output.dir from its last completed step")
	cmd.MarkFlagsMutuallyExclusive("overwrite", "resume")
	return cmd
}
