package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/results"
	simtrainer "github.com/hindsearch/hindsearch/sim/trainer"
)

// fullWeightSets is a full-weight run as on SkyRL's FSDP backend: rank 0,
// sglang_disk, the simulated trainer holding one model at a time.
var fullWeightSets = []string{"sync.kind=sglang_disk", "trainer.lora_rank=0", "sim.trainer.backend=fsdp",
	"policy.server=sglang", "policy.tokenize=local", "eval.datasets.nq=", "eval.datasets.hotpotqa="}

// A 30-step full-weight run keeps the trainer's checkpoint directory
// bounded: after every step it holds at most checkpoint.keep states and
// one sampler archive, and right after any save at most keep+1 states
// (the new one written before the old goes) and two sampler archives.
func TestTrainerDiskStaysBounded(t *testing.T) {
	r := testRecipe(t, "", append(slices.Clone(fullWeightSets), "train.steps=30", "train.batch_size=2", "train.group_size=2",
		"checkpoint.keep=2")...)
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	ts := emb.Sim().Trainer
	var worst simtrainer.CheckpointUsage
	var out bytes.Buffer
	rn := &Runner{Recipe: r, Deps: deps, Out: &out, afterStep: func(step int) {
		u := ts.CheckpointUsage()
		if u.States > 2 || u.Samplers > 1 {
			t.Errorf("after step %d the trainer holds %d states and %d sampler archives, want at most 2 and 1", step, u.States, u.Samplers)
		}
		worst.States, worst.Samplers = max(worst.States, u.States), max(worst.Samplers, u.Samplers)
	}}
	if _, err := rn.Run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if p := ts.PeakCheckpointUsage(); p.States > 3 || p.Samplers > 2 {
		t.Errorf("peak %+v, want at most 3 states and 2 sampler archives", p)
	}
	if worst.States != 2 {
		t.Errorf("at most %d states kept, want 2", worst.States)
	}
	if strings.Contains(out.String(), "not deleted") {
		t.Errorf("delete failures:\n%s", out.String())
	}
	// The run released its model.
	if ts.ModelLoaded(rn.last.modelID) {
		t.Error("the model is still loaded after the run")
	}
}

// Runs back to back against the same full-weight trainer (one model at a
// time) start at once: each releases its model as it ends. Without the
// release the second create_model fails with SkyRL's text.
func TestRunsBackToBackOnOneTrainer(t *testing.T) {
	sets := append(slices.Clone(fullWeightSets), "train.steps=2", "train.batch_size=2", "train.group_size=2")
	r := testRecipe(t, "", sets...)
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	// Every variant of an ablation against the same servers.
	for i, variant := range [][]string{nil, {"hindsight.enabled=false"}, {"hindsight.loss=none"}} {
		rv := testRecipe(t, "", append(append(slices.Clone(sets), "trainer.checkpoints_dir="+r.Trainer.CheckpointsDir), variant...)...)
		var out bytes.Buffer
		if _, err := (&Runner{Recipe: rv, Deps: deps, Out: &out}).Run(context.Background()); err != nil {
			t.Fatalf("run %d %v: %v\n%s", i, variant, err, out.String())
		}
	}
	// A model held by someone else: a clear error naming the trainer, the
	// model and the remedy.
	ctx := context.Background()
	tc := deps.Trainer.(*trainer.Client)
	sess, err := tc.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := tc.CreateModel(ctx, sess, r.Trainer.BaseModel, 0, 1); err != nil {
		t.Fatal(err)
	}
	_, err = (&Runner{Recipe: testRecipe(t, "", append(slices.Clone(sets), "trainer.checkpoints_dir="+r.Trainer.CheckpointsDir)...), Deps: deps}).Run(ctx)
	for _, want := range []string{"SkyRLTrainBackend already has a 'policy' model", deps.Trainer.URL(), r.Trainer.BaseModel, "5 minutes", "restart the trainer", "orchestrate doctor"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v lacks %q", err, want)
		}
	}
}

// A run interrupted (its context cancelled, as by SIGINT) releases its
// model; its --resume against the same, still-running trainer starts at
// once, restores from the newest saved state (checkpoint.every 3) with the
// batches of an uninterrupted run, and once a newer state is complete the
// interrupted model's states and samplers are deleted too.
func TestResumeOnLiveTrainerEvery3(t *testing.T) {
	sets := append(slices.Clone(fullWeightSets), "train.steps=7", "train.batch_size=2", "train.group_size=2", "checkpoint.every=3", "checkpoint.keep=1")
	clean, _ := runRecipe(t, testRecipe(t, "", sets...), 1)

	r := testRecipe(t, "", sets...)
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	ts := emb.Sim().Trainer
	ctx, cancel := context.WithCancel(context.Background())
	rn := &Runner{Recipe: r, Deps: deps, afterStep: func(step int) {
		if step == 5 {
			cancel()
		}
	}}
	if _, err := rn.Run(ctx); err == nil {
		t.Fatal("the interrupted run did not fail")
	}
	first := rn.last.modelID
	if ts.ModelLoaded(first) {
		t.Fatal("the interrupted run did not release its model")
	}
	var out bytes.Buffer
	rs := &Runner{Recipe: r, Deps: deps, Resume: true, Out: &out}
	got, err := rs.Run(context.Background())
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "resuming "+r.Output.Dir+" after step 3") {
		t.Errorf("output:\n%s", out.String())
	}
	if !slices.Equal(stepDigests(got), stepDigests(clean)) {
		t.Fatalf("digests %v, uninterrupted %v", stepDigests(got), stepDigests(clean))
	}
	// Nothing of the interrupted model is left; the resumed one keeps one
	// state and its last sampler archive.
	left, _ := filepath.Glob(filepath.Join(r.Trainer.CheckpointsDir, first, "*", "*.tar.gz"))
	top, _ := filepath.Glob(filepath.Join(r.Trainer.CheckpointsDir, first, "*.tar.gz"))
	if len(left)+len(top) != 0 {
		t.Errorf("the interrupted model's checkpoints are left: %v %v", top, left)
	}
	if u := ts.CheckpointUsage(); u.States != 1 || u.Samplers != 1 {
		t.Errorf("usage %+v, want 1 state and 1 sampler archive", u)
	}
	if _, err := os.Stat(filepath.Join(r.Output.Dir, ledgerFile)); err != nil {
		t.Error(err)
	}
}

// mergeMetrics reduces each forward_backward metric across chunks by its
// SkyRL suffix: mean, max, min, last, sum; no suffix sums as before.
func TestMergeMetricsBySuffix(t *testing.T) {
	fb := []map[string]float64{
		{"loss:sum": 1, "policy_lr:last": 1e-6, "ratio:mean": 1.0, "ratio_max:max": 1.5, "ratio_min:min": 0.5, "tokens": 10},
		{"loss:sum": 2, "policy_lr:last": 2e-6, "ratio:mean": 2.0, "ratio_max:max": 1.2, "ratio_min:min": 0.7, "tokens": 5},
		{"loss:sum": 3, "policy_lr:last": 3e-6, "ratio:mean": 3.0, "ratio_max:max": 1.9, "ratio_min:min": 0.6, "tokens": 1},
	}
	got := mergeMetrics(fb, []map[string]float64{{"grad_norm": 0.25}, {"grad_norm": 0.75}}) // the mean over optim_steps
	want := map[string]float64{"forward_backward/loss:sum": 6, "forward_backward/policy_lr:last": 3e-6, "forward_backward/ratio:mean": 2,
		"forward_backward/ratio_max:max": 1.9, "forward_backward/ratio_min:min": 0.5, "forward_backward/tokens": 16, "optim_step/grad_norm": 0.5}
	for k, w := range want {
		if d := got[k] - w; d > 1e-12 || d < -1e-12 {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %v", got)
	}
}

// Two runs of one recipe name against the same LoRA replicas (an
// ablation's variants, a rerun): each step's adapter name is the same in
// both, and the replicas still hold the first run's adapters. The second
// run must serve its own weights, not the first run's adapter of the same
// name: its batches equal those of the same run on fresh servers.
func TestSecondRunOnLiveLoRAReplicasServesItsOwnAdapters(t *testing.T) {
	sets := []string{"train.steps=3", "train.batch_size=4", "train.group_size=2", "sync.keep=3", "eval.datasets.nq=",
		"sim.trainer.backend=fsdp"}
	second := append(slices.Clone(sets), "seed=7")
	fresh, _ := runRecipe(t, testRecipe(t, "", second...), 1)

	r := testRecipe(t, "", sets...)
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	var out bytes.Buffer
	if _, err := (&Runner{Recipe: r, Deps: deps, Out: &out}).Run(context.Background()); err != nil {
		t.Fatalf("first run: %v\n%s", err, out.String())
	}
	r2 := testRecipe(t, "", append(slices.Clone(second), "trainer.checkpoints_dir="+r.Trainer.CheckpointsDir)...)
	out.Reset()
	got, err := (&Runner{Recipe: r2, Deps: deps, Out: &out}).Run(context.Background())
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, out.String())
	}
	if g, w := stepDigests(got), stepDigests(fresh); !slices.Equal(g, w) {
		t.Errorf("second run on live replicas: digests %v, on fresh servers %v", g, w)
	}
}

// A run killed with SIGKILL before its first saved state leaves no
// state.json, only trainer_model.json, and its model holds the FSDP
// trainer. A rerun in the directory (--overwrite) releases that model
// before it creates its own, and deletes the replaced run's trainer
// checkpoints from the ledger.
func TestOverwriteReleasesTheKilledRunsModelAndCheckpoints(t *testing.T) {
	sets := append(slices.Clone(fullWeightSets), "train.steps=2", "train.batch_size=2", "train.group_size=2", "checkpoint.keep=1")
	r := testRecipe(t, "", sets...)
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	ts := emb.Sim().Trainer
	ctx := context.Background()
	// The killed run: a model with a saved state, recorded as a run does,
	// never released.
	tc := deps.Trainer.(*trainer.Client)
	sess, err := tc.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	killed, err := tc.CreateModel(ctx, sess, r.Trainer.BaseModel, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := results.Create(r.Output.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeTrainerModel(dir, killed, deps.Trainer.URL()); err != nil {
		t.Fatal(err)
	}
	rt, _ := loadRetention(dir, 1, "")
	if err := rt.add(trainerCheckpoint{ModelID: killed, ID: "weights/old-state0001", Step: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.SaveState(ctx, killed, "old-state0001"); err != nil {
		t.Fatal(err)
	}
	if err := rt.complete(killed, "weights/old-state0001", 1); err != nil {
		t.Fatal(err)
	}
	if err := dir.AppendJSONL("eval.jsonl", map[string]int{"step": 0}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := (&Runner{Recipe: r, Deps: deps, Out: &out, Overwrite: true}).Run(ctx); err != nil {
		t.Fatalf("rerun with --overwrite: %v\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(r.Trainer.CheckpointsDir, killed, "old-state0001.tar.gz")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the replaced run's state is still on the trainer (%v)", err)
	}
	if u := ts.CheckpointUsage(); u.States != 1 || u.Samplers != 1 {
		t.Errorf("trainer holds %+v, want the new run's one state and one sampler archive", u)
	}
	id, err := readTrainerModel(dir)
	if err != nil || id == "" || id == killed {
		t.Errorf("trainer_model.json names %q (%v), want the new run's model", id, err)
	}
}

// sync.kind tinker keeps its ephemeral sampler checkpoints (ss<N>_seq<M>)
// bounded too: the initial weights' and each step's are deleted once no
// step samples them, through the same ledger; on JAX each is an adapter
// archive, on FSDP a marker.
func TestTinkerSamplerCheckpointsStayBounded(t *testing.T) {
	for _, backend := range []string{"jax", "fsdp"} {
		t.Run(backend, func(t *testing.T) {
			r := testRecipe(t, "", "policy.server=tinker", "sync.kind=tinker", "policy.tokenize=local", "sim.trainer.backend="+backend,
				"train.steps=12", "train.batch_size=2", "train.group_size=2", "checkpoint.every=4", "checkpoint.keep=2")
			// Kept: the newest state's samplers (resume), the newest step's
			// (the next step samples it) and the one being made.
			out := runWatchingTrainer(t, r, func(step int, u simtrainer.CheckpointUsage) {
				if u.Samplers > 3 || u.States > 2 {
					t.Errorf("after step %d the trainer holds %d sampler checkpoints and %d states, want at most 3 and 2", step, u.Samplers, u.States)
				}
			})
			if strings.Contains(out, "not deleted") {
				t.Errorf("delete failures:\n%s", out)
			}
		})
	}
}

// On a trainer without the DELETE checkpoint route (skyrl 0.3.0 from PyPI,
// played by sim.trainer.delete_route false) whose checkpoints directory the
// run reaches (trainer.checkpoints_dir), the run says so once and removes
// superseded checkpoints from that directory itself: the disk stays
// bounded as with the route. Before the fix the route's bare 404 counted
// as "deleted": the ledger emptied and the disk kept every state, silently.
func TestNoDeleteRouteRemovesOnTheTrainersDisk(t *testing.T) {
	r := testRecipe(t, "", append(slices.Clone(fullWeightSets), "train.steps=5", "train.batch_size=2", "train.group_size=2",
		"checkpoint.every=1", "checkpoint.keep=1", "sim.trainer.delete_route=false")...)
	out := runWatchingTrainer(t, r, func(step int, u simtrainer.CheckpointUsage) {
		if u.States > 1 || u.Samplers > 1 {
			t.Errorf("after step %d the trainer's disk holds %d states and %d sampler archives, want at most 1 and 1", step, u.States, u.Samplers)
		}
	})
	if n := strings.Count(out, "no DELETE checkpoint route"); n != 1 {
		t.Errorf("the missing route was reported %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "removed from its disk instead, under "+r.Trainer.CheckpointsDir) || strings.Contains(out, "were left") {
		t.Errorf("output:\n%s", out)
	}
	if probes, _ := filepath.Glob(filepath.Join(r.Trainer.CheckpointsDir, "*", "*", "*.probe")); len(probes) > 1 {
		t.Errorf("probe files left: %v", probes)
	}
}

// noRouteTrainer answers every delete as skyrl 0.3.0 does.
type noRouteTrainer struct {
	trainer.Trainer
	deletes int
}

func (n *noRouteTrainer) DeleteCheckpoint(context.Context, string, string) error {
	n.deletes++
	return fmt.Errorf("trainer delete checkpoint: %w", trainer.ErrNoDeleteRoute)
}

// Without the trainer's disk, a trainer lacking the DELETE route gets one
// delete, the run says once what is left and how to free it, and the
// ledger keeps every superseded checkpoint for a later run.
func TestNoDeleteRouteKeepsTheLedger(t *testing.T) {
	dir := &results.RunDir{Path: t.TempDir()}
	rt, err := loadRetention(dir, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		for _, c := range []trainerCheckpoint{{ModelID: "model_a", ID: fmt.Sprintf("weights/s%d", i), Step: i},
			{ModelID: "model_a", ID: fmt.Sprintf("sampler_weights/p%d", i), Step: i}} {
			if err := rt.add(c); err != nil {
				t.Fatal(err)
			}
		}
		if err := rt.complete("model_a", fmt.Sprintf("weights/s%d", i), i); err != nil {
			t.Fatal(err)
		}
	}
	tr := &noRouteTrainer{}
	var out bytes.Buffer
	for range 2 {
		rt.prune(context.Background(), tr, func(string, string) bool { return false }, &out)
	}
	if tr.deletes != 1 {
		t.Errorf("%d deletes sent to a trainer without the route, want 1", tr.deletes)
	}
	if n := strings.Count(out.String(), "cannot be deleted"); n != 1 || !strings.Contains(out.String(), "trainer.checkpoints_dir") {
		t.Errorf("output:\n%s", out.String())
	}
	if _, _, left := rt.counts(); left != 5 {
		t.Errorf("%d left, want 5 (2 states and 3 sampler checkpoints)", left)
	}
	again, err := loadRetention(dir, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(again.held) != 6 {
		t.Errorf("the ledger holds %d checkpoints, want all 6: %+v", len(again.held), again.held)
	}
}

// runWatchingTrainer runs r against freshly started embedded servers and
// calls check with the simulated trainer's checkpoint directory usage after
// every step; it returns the run's output.
func runWatchingTrainer(t *testing.T, r *recipes.Recipe, check func(step int, u simtrainer.CheckpointUsage)) string {
	t.Helper()
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	ts := emb.Sim().Trainer
	var out bytes.Buffer
	rn := &Runner{Recipe: r, Deps: deps, Out: &out, afterStep: func(step int) { check(step, ts.CheckpointUsage()) }}
	if _, err := rn.Run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return out.String()
}
