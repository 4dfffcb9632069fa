package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/orchestrator/doctor"
)

func newDoctorCmd(e *env) *cobra.Command {
	var rf recipeFlags
	var timeout float64
	cmd := &cobra.Command{
		Use:   "doctor RECIPE",
		Short: "Check every server a recipe names and say how to fix what is wrong",
		Long: `Check, without training, every server RECIPE names and the sync directory:
each policy replica's health, served models, weight-sync route (runtime LoRA
loading, or SGLang's /update_weights_from_disk), tokenizer (identical on every
replica and under the teacher model) and chat template; the judge (its API key
variable and a probe chat completion); the retriever (a probe /retrieve and
the shape of its answer); the trainer (its API key variable, healthz and the
base model among its capabilities); and that sync.dir can be written and read
back. Every check runs, even after a failure. It prints one row per check,
then each failure with its fix, and exits non-zero when a check failed
(warnings do not fail). Roles whose URL is "embedded" are started on loopback
ports first, as by run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v: want > 0 seconds", timeout)
			}
			r, deps, emb, err := rf.connect(cmd.Context(), e, args[0])
			if err != nil {
				return err
			}
			defer emb.Close()
			rep := doctor.Run(cmd.Context(), r, deps, doctor.Options{
				Environ:      e.environ,
				CheckTimeout: time.Duration(timeout * float64(time.Second)),
			})
			if err := rep.Write(e.stdout); err != nil {
				return err
			}
			if f := rep.Failed(); len(f) > 0 {
				return fmt.Errorf("doctor: %d of %d checks failed", len(f), len(rep.Checks))
			}
			return nil
		},
	}
	rf.register(cmd.Flags())
	cmd.Flags().Float64Var(&timeout, "timeout", doctor.DefaultCheckTimeout.Seconds(), "seconds each check may take, retries included")
	return cmd
}
