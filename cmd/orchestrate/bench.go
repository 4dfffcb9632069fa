package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hindsearch/hindsearch/orchestrator/bench"
)

func newBenchCmd(e *env) *cobra.Command {
	o := bench.Options{Recipe: "recipes/sim.yaml", Scale: 1}
	var jsonPath string
	var keep bool
	var passages int
	var phaseSeconds float64
	var engines []string
	var cpuProfile, memProfile string
	seeds := bench.DefaultSeedCount
	var docs []string
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
The scheduling figures are each the mean over --seeds recipe seeds (1..N),
printed with their range. The figures are ratios measured in the same run;
they are SIMULATED.`,
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
			if seeds < 1 {
				return fmt.Errorf("--seeds %d: want at least 1", seeds)
			}
			o.Seeds = bench.SeedRange(seeds)
			if len(docs) > 0 && (len(o.Only) > 0 || o.Scale != 1) {
				return fmt.Errorf("--docs writes the whole bench's figures: not with --only or --scale")
			}
			var prov bench.Provenance
			if len(docs) > 0 {
				// Read before the scenarios run: the figures are of the
				// code as it was when they started.
				var err error
				if prov, err = benchProvenance(cmd.Context(), cmd.Flags(), docs); err != nil {
					return fmt.Errorf("--docs: %w", err)
				}
				if strings.HasSuffix(prov.Commit, "-dirty") {
					fmt.Fprintf(e.stderr, "bench: the working tree has uncommitted changes: the documents will say %s\n", prov.Commit)
				}
			}
			for _, g := range o.Only {
				if !slices.Contains(bench.Groups, g) {
					return fmt.Errorf("--only %s: no such scenario group (%s)", g, strings.Join(bench.Groups, ", "))
				}
			}
			if slices.Contains(o.Only, "retrieval") {
				// The retrieval scale benchmark runs alone (it is not a
				// scheduling scenario and takes the machine's memory).
				if len(o.Only) > 1 {
					return fmt.Errorf("--only retrieval runs alone, not with %v", o.Only)
				}
				return runRetrievalBench(cmd, e, o.Recipe, o.Dir, passages, phaseSeconds, engines, jsonPath)
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
			region := bench.DocsFigures(rep, prov)
			for _, d := range docs {
				if err := bench.WriteDocs(d, region); err != nil {
					return fmt.Errorf("--docs: %w", err)
				}
				fmt.Fprintf(e.stderr, "bench: wrote the figures of %s into %s\n", prov.Commit, d)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Recipe, "recipe", o.Recipe, "base recipe the scenarios override")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the figures as JSON to this file")
	cmd.Flags().Float64Var(&o.Scale, "scale", o.Scale, "multiply the scenarios' workloads")
	cmd.Flags().StringVar(&o.Dir, "dir", "", "keep the scenarios' run directories here (default: a temporary directory)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary directory")
	cmd.Flags().StringArrayVar(&docs, "docs", nil, "write the figures, with the commit they were measured at, into this Markdown file's bench-figures region (repeat; make bench-docs)")
	cmd.Flags().IntVar(&seeds, "seeds", seeds, "run each scheduling scenario at recipe seeds 1..N and report each figure's mean and range")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the orchestrator side) to this file")
	cmd.Flags().StringVar(&memProfile, "memprofile", "", "write an allocation profile of this process (the orchestrator side) to this file at the end")
	cmd.Flags().StringSliceVar(&o.Only, "only", nil, "run only these scenarios: speedup, hindsight, replicas, affinity, cpu, cpu-real (with --real-policy-set); or retrieval alone (with --passages)")
	cmd.Flags().StringArrayVar(&o.RealPolicy, "real-policy-set", nil, "cpu-real: a key=value that points the policy at real servers (repeat: policy.urls=..., policy.model=..., policy.tokenizer=...); the scenario measures the CPU per turn against them beside the simulator's")
	cmd.Flags().StringArrayVar(&o.RealRollout, "real-rollout-set", nil, "cpu-real: a key=value both sides share (repeat: rollout.max_turn_tokens=48, ...)")
	cmd.Flags().IntVar(&passages, "passages", 100_000, "--only retrieval: passages of the generated Wikipedia-like corpus")
	cmd.Flags().Float64Var(&phaseSeconds, "seconds", 10, "--only retrieval: how long each query phase runs")
	cmd.Flags().StringSliceVar(&engines, "engines", []string{bench.EngineStatic, bench.EngineBleve}, "--only retrieval: the indexes to measure side by side, each in its own process: static (the embedded retriever's), bleve (its previous engine), or bleve with options, e.g. bleve-shards2, bleve-batch10k, bleve-unmerged, bleve-terms (docs/bench.md)")
	return cmd
}

// benchProvenance says what the figures are measured at: the checkout's
// short commit, "-dirty" when files other than the documents to write
// have changes, the command line (without --docs) and today's date (UTC).
func benchProvenance(ctx context.Context, flags *pflag.FlagSet, docs []string) (bench.Provenance, error) {
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", args...).Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w (the figures need the commit they are measured at)", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	commit, err := git("rev-parse", "--short", "HEAD")
	if err != nil {
		return bench.Provenance{}, err
	}
	status := []string{"status", "--porcelain", "--", "."}
	for _, d := range docs {
		status = append(status, ":(exclude)"+d)
	}
	changed, err := git(status...)
	if err != nil {
		return bench.Provenance{}, err
	}
	if changed != "" {
		commit += "-dirty"
	}
	args := []string{"orchestrate", "bench"}
	flags.Visit(func(f *pflag.Flag) {
		if f.Name != "docs" {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return bench.Provenance{Commit: commit, Command: strings.Join(args, " "),
		Date: time.Now().UTC().Format("2006-01-02")}, nil
}

// runRetrievalBench runs the retrieval scale benchmark for each engine and
// prints them side by side (and the reports as a JSON list). With more
// than one engine each runs in a child process of this binary, so that
// each one's memory figures are its own; the generated corpus is made
// once, in dir, and shared.
// The shipped corpus and questions are read from the recipe's data/.
func runRetrievalBench(cmd *cobra.Command, e *env, recipe, dir string, passages int, seconds float64, engines []string, jsonPath string) error {
	if seconds <= 0 {
		return fmt.Errorf("--seconds %v: want more than 0", seconds)
	}
	if len(engines) == 0 {
		return fmt.Errorf("--engines: name at least one of %s, %s", bench.EngineStatic, bench.EngineBleve)
	}
	for _, eng := range engines {
		if err := bench.CheckEngine(eng); err != nil {
			return err
		}
	}
	var reps []*bench.RetrievalReport
	if len(engines) == 1 {
		recipeDir := filepath.Dir(recipe)
		var qs []string
		for _, n := range []string{"nq", "hotpotqa", "triviaqa", "popqa", "2wikimultihopqa", "musique", "bamboogle"} {
			qs = append(qs, filepath.Join(recipeDir, "data", "qa", n+".jsonl"))
		}
		rep, err := bench.Retrieval(cmd.Context(), bench.RetrievalOptions{Passages: passages, Dir: dir, Out: e.stderr, Engine: engines[0],
			Corpus: filepath.Join(recipeDir, "data", "corpus", "passages.jsonl"), Questions: qs, Seconds: seconds})
		if err != nil {
			return err
		}
		reps = append(reps, rep)
	} else {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		for _, eng := range engines {
			out := filepath.Join(dir, "report-"+eng+".json")
			child := exec.CommandContext(cmd.Context(), self, "bench", "--only", "retrieval", "--passages", strconv.Itoa(passages),
				"--engines", eng, "--dir", dir, "--recipe", recipe, "--json", out, "--seconds", strconv.FormatFloat(seconds, 'g', -1, 64))
			child.Stdout, child.Stderr = io.Discard, e.stderr
			if err := child.Run(); err != nil {
				return fmt.Errorf("retrieval bench, engine %s: %w", eng, err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				return err
			}
			var got []*bench.RetrievalReport
			if err := json.Unmarshal(b, &got); err != nil || len(got) != 1 {
				return fmt.Errorf("retrieval bench, engine %s: report %s: %v", eng, out, err)
			}
			reps = append(reps, got[0])
		}
	}
	fmt.Fprintf(e.stdout, "retrieval at %d passages (generated corpus; the real embedded BM25 index and server; each engine in its own process):\n", passages)
	for _, rep := range reps {
		build := fmt.Sprintf("build %.1f s (%.0f passages/s)", rep.BuildSeconds, rep.BuildPerSecond)
		if rep.IndexReused {
			build = "build not timed (the index in --dir was reused or resumed)"
		}
		segments := ""
		if rep.Segments > 0 {
			segments = fmt.Sprintf(" (%d segments)", rep.Segments)
		}
		fmt.Fprintf(e.stdout, "%s: %s, index %.1f MB%s, peak RSS %.0f MB, serving RSS %.0f MB, start %.2f s\n",
			rep.Engine, build, float64(rep.IndexBytes)/(1<<20), segments, float64(rep.PeakRSSBytes)/(1<<20), float64(rep.ServingRSSBytes)/(1<<20), rep.StartSeconds)
		for _, p := range rep.Phases {
			how := fmt.Sprintf("calls of %d at concurrency %d", p.Batch, p.Concurrency)
			if p.Name == "inproc-1thread" {
				how = "the index alone, in process, one goroutine, no HTTP; a query's"
			}
			fmt.Fprintf(e.stdout, "  %-14s %7.1f queries/s  (%s: p50 %.1f ms, p99 %.1f ms)\n",
				p.Name, p.QueriesPerSec, how, p.CallP50Millis, p.CallP99Millis)
		}
		fmt.Fprintf(e.stdout, "  recall@3 on the shipped corpus and questions: %.3f (%d questions)\n", rep.RecallAt3, rep.RecallQuestions)
	}
	if len(reps) > 1 {
		// Each engine against the previous engine as kept, when measured,
		// else against the last one named.
		base := reps[len(reps)-1]
		for _, rep := range reps {
			if rep.Engine == bench.EngineBleve {
				base = rep
			}
		}
		for _, rep := range reps {
			if rep == base {
				continue
			}
			for i, p := range rep.Phases {
				if i < len(base.Phases) && base.Phases[i].QueriesPerSec > 0 {
					fmt.Fprintf(e.stdout, "%s/%s %s: %.1fx the queries/s\n", rep.Engine, base.Engine, p.Name, p.QueriesPerSec/base.Phases[i].QueriesPerSec)
				}
			}
		}
	}
	if jsonPath != "" {
		b, err := json.MarshalIndent(reps, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(jsonPath, append(b, '\n'), 0o644)
	}
	return nil
}
