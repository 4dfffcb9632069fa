package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/orchestrator"
)

func newEvalCmd(e *env) *cobra.Command {
	var rf recipeFlags
	var wf watchFlags
	opt := orchestrator.EvalOptions{Strategy: format.StrategySearch, Step: -1}
	cmd := &cobra.Command{
		Use:   "eval RECIPE",
		Short: "Evaluate a model greedily on the recipe's eval datasets (direct, rag or search)",
		Long: `Evaluate greedily, with exact match and F1 per dataset, on eval.datasets
(eval.per_dataset questions each; 0 means whole files):

  direct   the question alone, answered once
  rag      top-k passages retrieved with the question, answered once
  search   the search agent loop (Search-R1 format)

--checkpoint names a model the policy servers serve, or the path of an adapter
directory or sampler archive (.tar.gz; a gzip tar or, as SkyRL's FSDP backend
writes, a plain tar) to load on them first (e.g.
runs/sim/adapters/sim-model-000002/sim-sim-model-000002-step0016). Records are appended to output.dir/eval.jsonl
with the strategy named, and per-question results go to output.dir/questions/.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(format.Strategies, opt.Strategy) {
				return fmt.Errorf("--strategy %q: want one of %s", opt.Strategy, strings.Join(format.Strategies, ", "))
			}
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
			opt.Out, opt.Progress, opt.Metrics = wa.out, wa.progress, wa.metrics
			_, err = orchestrator.Evaluate(cmd.Context(), r, deps, opt)
			return err
		},
	}
	rf.register(cmd.Flags())
	wf.register(cmd.Flags())
	cmd.Flags().StringVar(&opt.Strategy, "strategy", opt.Strategy, "direct, rag or search")
	cmd.Flags().StringVar(&opt.Checkpoint, "checkpoint", "", "model name served by the policy servers, or an adapter directory or .tar.gz to load (default: the base model)")
	cmd.Flags().IntVar(&opt.Step, "step", -1, "training step to record (default: from a -stepNNNN checkpoint name, else 0)")
	return cmd
}
