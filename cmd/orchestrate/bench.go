package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/orchestrator/bench"
)

func newBenchCmd(e *env) *cobra.Command {
	o := bench.Options{Recipe: "recipes/sim.yaml", Scale: 1}
	var jsonPath string
	var keep bool
	var cpuProfile, memProfile string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure scheduling and control-plane cost on the simulator, side by side in one run",
		Long: `Run fixed scenarios on the embedded simulator with its latency model (a
vLLM-like continuous-batching policy, and judge, trainer and retriever
latencies), side by side in one invocation, and print the figures with their
targets: async_speedup, hindsight_overhead, busy_fraction, cpu_us_per_turn
(and cpu_us_per_turn_local, with policy.tokenize local, and
cpu_seconds_per_paper_step, over a paper-scale step's 10,240 turns),
bytes_per_inflight_token, replica_scaling_2, replica_scaling_4 and
retriever_calls_saved. docs/bench.md defines each figure and its scenario.
The figures are ratios measured in the same run; they are SIMULATED.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Dir == "" {
				d, err := os.MkdirTemp("", "hindsearch-bench-")
				if err != nil {
					return err
				}
				o.Dir = d
				if !keep {
					defer os.RemoveAll(d)
				}
			}
			argv, err := bench.SimCommand()
			if err != nil {
				return err
			}
			o.SimCommand = argv
			o.Out = e.stderr
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			rep, err := bench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if memProfile != "" {
				// Allocations since the start (alloc_space, alloc_objects)
				// and what is live at the end (inuse_*).
				f, err := os.Create(memProfile)
				if err != nil {
					return fmt.Errorf("--memprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
					return fmt.Errorf("--memprofile: %w", err)
				}
			}
			if err := bench.WriteTable(e.stdout, rep); err != nil {
				return err
			}
			if jsonPath != "" {
				b, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("--json: %w", err)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Recipe, "recipe", o.Recipe, "base recipe the scenarios override")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the figures as JSON to this file")
	cmd.Flags().Float64Var(&o.Scale, "scale", o.Scale, "multiply the scenarios' workloads")
	cmd.Flags().StringVar(&o.Dir, "dir", "", "keep the scenarios' run directories here (default: a temporary directory)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary directory")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the orchestrator side) to this file")
	cmd.Flags().StringVar(&memProfile, "memprofile", "", "write an allocation profile of this process (the orchestrator side) to this file at the end")
	cmd.Flags().StringSliceVar(&o.Only, "only", nil, "run only these scenarios: speedup, hindsight, replicas, cpu")
	return cmd
}
