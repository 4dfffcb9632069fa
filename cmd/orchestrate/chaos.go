package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
)

// chaosFaults are the faults of the chaos run, on every simulated role.
var chaosFaults = "500,502,503,429,reset,malformed,slow,hang,lost@0.08"

func newChaosCmd(e *env) *cobra.Command {
	var rf recipeFlags
	kills := 3
	seed := uint64(1)
	servers := false
	cmd := &cobra.Command{
		Use:   "chaos RECIPE",
		Short: "Run a recipe cleanly, then again under heavy faults with kill -9 and --resume, and compare",
		Long: `Run RECIPE once without faults; then run it again in another directory, as a
separate orchestrate process, with faults injected into every simulated role
(` + chaosFaults + `) and http.timeout_seconds=1, killing the
process with SIGKILL at random moments (--kills times) and resuming it with
--resume until it finishes. The batch digests of every step, the step count
and the evaluation records must equal the clean run's.

With --servers the faulty run drives one "orchestrate serve sim" of the
recipe, started once with the faults and kept running across every kill and
resume, as real servers outlive a run: each resumed run meets the trainer
still holding the killed run's model and policy replicas still serving the
weights it last synced.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			base, err := os.MkdirTemp("", "hindsearch-chaos-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(base)
			common := []string{args[0]}
			for _, s := range rf.sets {
				common = append(common, "--set", s)
			}
			run := func(ctx context.Context, dir string, extra ...string) *exec.Cmd {
				argv := append(append([]string{"run"}, common...), "--set", "output.dir="+dir)
				c := exec.CommandContext(ctx, exe, append(argv, extra...)...)
				c.Stdout, c.Stderr = &bytes.Buffer{}, &bytes.Buffer{}
				return c
			}
			ctx := cmd.Context()
			clean := filepath.Join(base, "clean")
			fmt.Fprintf(e.stdout, "chaos: clean run into %s\n", clean)
			c := run(ctx, clean)
			t0 := time.Now()
			if err := c.Run(); err != nil {
				return fmt.Errorf("clean run: %w\n%s", err, c.Stderr)
			}
			cleanSecs := time.Since(t0).Seconds()
			cleanSteps, err := (&results.RunDir{Path: clean}).ReadSteps()
			if err != nil {
				return err
			}
			var faultSets []string
			spec := strings.Split(chaosFaults, "@")
			for _, role := range []string{"policy", "judge", "retriever", "trainer"} {
				faultSets = append(faultSets, "--set", "sim.faults."+role+".rate="+spec[1], "--set", "sim.faults."+role+".kinds="+spec[0],
					"--set", "sim.faults."+role+".hang_ms=1500")
			}
			// A search that fails even its retries fails the step (and the
			// loop resumes it) instead of becoming the trajectory's
			// observation, which the clean run never saw.
			httpSets := []string{"--set", "http.timeout_seconds=1", "--set", "http.retries=10",
				"--set", "http.retry_wait_min_ms=1", "--set", "http.retry_wait_max_ms=50", "--set", "retriever.on_error=fail"}
			if servers {
				// The faults go to the servers, which outlive every run;
				// the run keeps the short timeouts and many retries.
				sets, stop, err := startChaosServers(ctx, exe, common, faultSets, filepath.Join(base, "servers"))
				if err != nil {
					return err
				}
				defer stop()
				faultSets = sets
				fmt.Fprintf(e.stdout, "chaos: faulty run against one serve sim that outlives it\n")
			}
			faultSets = append(faultSets, httpSets...)
			chaos := filepath.Join(base, "chaos")
			rng := rand.New(rand.NewPCG(seed, 7))
			killed, resumed := 0, 0
			for attempt := 0; ; attempt++ {
				extra := faultSets
				if attempt > 0 {
					extra = append(append([]string{}, faultSets...), "--resume")
					resumed++
				}
				c := run(ctx, chaos, extra...)
				if err := c.Start(); err != nil {
					return err
				}
				done := make(chan error, 1)
				go func() { done <- c.Wait() }()
				var timer <-chan time.Time
				if killed < kills {
					// Kill at a random moment after a random step has completed
					// (so resumes happen from every kind of point), or at a
					// random time when the run is still starting.
					target := 1 + rng.IntN(max(len(cleanSteps)-1, 1))
					extra := time.Duration(rng.Float64() * cleanSecs / float64(max(len(cleanSteps), 1)) * float64(time.Second))
					if servers && attempt > 0 {
						// Against servers that outlive the run, a resumed
						// run is killed only once it has completed a step
						// of its own: a kill inside its create_model would
						// leave a SkyRL FSDP trainer holding a model whose
						// id the run never learned (no route lists them),
						// freed only by SkyRL's stale-session cleanup
						// after 300 s (docs/gpu.md). The draw is the same.
						target = max(target, (&results.RunDir{Path: chaos}).SavedStep()+1)
					}
					timer = killAfter(ctx, chaos, target, extra, done)
				}
				select {
				case err := <-doneOut(done):
					if err != nil {
						var ee *exec.ExitError
						if errors.As(err, &ee) && attempt > 0 && strings.Contains(c.Stderr.(*bytes.Buffer).String(), "no completed step") {
							continue // killed before its first step: start over
						}
						return fmt.Errorf("chaos run: %w\n%s", err, c.Stderr)
					}
				case <-timer:
					_ = c.Process.Signal(syscall.SIGKILL)
					<-done
					killed++
					fmt.Fprintf(e.stdout, "chaos: killed the run with SIGKILL (%d/%d)\n", killed, kills)
					if _, err := os.Stat(filepath.Join(chaos, "state.json")); err != nil {
						// Killed before the first step completed: there is nothing to
						// resume; the next attempt starts over.
						_ = os.RemoveAll(chaos)
						attempt = -1
					}
					continue
				case <-ctx.Done():
					return ctx.Err()
				}
				break
			}
			want := cleanSteps
			got, err := (&results.RunDir{Path: chaos}).ReadSteps()
			if err != nil {
				return err
			}
			if len(got) != len(want) {
				return fmt.Errorf("chaos: %d steps, clean %d", len(got), len(want))
			}
			for i := range want {
				if got[i].Step != want[i].Step || got[i].BatchDigest != want[i].BatchDigest {
					return fmt.Errorf("chaos: step %d digest %s, clean step %d %s", got[i].Step, got[i].BatchDigest, want[i].Step, want[i].BatchDigest)
				}
			}
			we, err := (&results.RunDir{Path: clean}).ReadEval()
			if err != nil {
				return err
			}
			ge, err := (&results.RunDir{Path: chaos}).ReadEval()
			if err != nil {
				return err
			}
			// Whole records, the search health included (the same route and
			// trajectories give it bit for bit).
			gj, _ := json.Marshal(ge)
			wj, _ := json.Marshal(we)
			if string(gj) != string(wj) {
				return fmt.Errorf("chaos: evaluations differ:\n%s\n%s", gj, wj)
			}
			fmt.Fprintf(e.stdout, "chaos: OK: %d steps and %d evaluation records equal the clean run's after %d kills and %d resumes under faults (%s)\n",
				len(got), len(ge), killed, resumed, chaosFaults)
			return nil
		},
	}
	rf.register(cmd.Flags())
	cmd.Flags().IntVar(&kills, "kills", kills, "how many times to kill the run")
	cmd.Flags().Uint64Var(&seed, "seed", seed, "seed of the kill times")
	cmd.Flags().BoolVar(&servers, "servers", servers, "run the faulty run against one orchestrate serve sim (with the faults) that outlives every kill")
	return cmd
}

// killAfter fires after the run in dir has completed step target (read
// from its state.json) and a further delay, unless the run ends first.
func killAfter(ctx context.Context, dir string, target int, delay time.Duration, done chan error) <-chan time.Time {
	fire := make(chan time.Time, 1)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if len(done) > 0 {
				return
			}
			if (&results.RunDir{Path: dir}).SavedStep() >= target {
				time.Sleep(delay)
				fire <- time.Now()
				return
			}
		}
	}()
	return fire
}

// startChaosServers starts "orchestrate serve sim" of the recipe with
// faults (the recipe and its sets, then the sim.faults.* sets), reads its
// address line and returns the sets that point a run at those servers, and
// a stop function that ends the servers.
func startChaosServers(ctx context.Context, exe string, common, faultSets []string, dir string) ([]string, func(), error) {
	argv := append(append(append([]string{"serve", "sim"}, common...), faultSets...), "--set", "output.dir="+dir, "--json")
	sctx, cancel := context.WithCancel(ctx)
	c := exec.CommandContext(sctx, exe, argv...)
	stdin, err := c.StdinPipe()
	if err != nil {
		cancel()
		return nil, nil, err
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		cancel()
		return nil, nil, err
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("serve sim: %w", err)
	}
	stop := func() {
		_ = stdin.Close() // serve sim ends when its stdin closes
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cancel()
			<-done
		}
		cancel()
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("serve sim: no address line (%v)\n%s", err, stderr.String())
	}
	var a simAddrs
	if err := json.Unmarshal([]byte(line), &a); err != nil {
		stop()
		return nil, nil, fmt.Errorf("serve sim: address line %q: %w", line, err)
	}
	var sets []string
	if len(a.Policy) > 0 {
		// The simulated replicas speak the simulator's tokenizer.
		sets = append(sets, "--set", "policy.urls="+strings.Join(a.Policy, ","), "--set", "policy.tokenizer="+recipes.TokenizerSim)
	}
	if len(a.Reference) > 0 {
		sets = append(sets, "--set", "reference.urls="+strings.Join(a.Reference, ","))
	}
	for _, kv := range [][2]string{{"judge.url", a.Judge}, {"trainer.url", a.Trainer}, {"retriever.url", a.Retriever}, {"trainer.checkpoints_dir", a.CheckpointsDir}} {
		if kv[1] != "" {
			sets = append(sets, "--set", kv[0]+"="+kv[1])
		}
	}
	return sets, stop, nil
}

// doneOut reads the run's result without consuming it for killAfter's
// check.
func doneOut(done chan error) <-chan error { return done }
