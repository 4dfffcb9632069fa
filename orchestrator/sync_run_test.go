package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/results"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// sglangSets run the embedded default with full-weight syncs on two
// replicas, without the nq evaluation.
var sglangSets = []string{"sync.kind=sglang_disk", "trainer.lora_rank=0", "sim.trainer.backend=fsdp", "policy.urls=embedded,embedded", "eval.datasets.nq="}

// replicaURLs are a run's policy replica URLs.
func replicaURLs(deps roles.Deps) []string {
	var us []string
	for _, p := range deps.Policies {
		us = append(us, p.URL())
	}
	return us
}

// servedBy is a StepRecord.Replicas in which every replica of urls served
// model.
func servedBy(model string, urls ...string) map[string]string {
	m := map[string]string{}
	for _, u := range urls {
		m[u] = model
	}
	return m
}

// The embedded default trains with sync.kind sglang_disk end to end: the
// simulated trainer's archives are unpacked under sync.dir and loaded in
// place on both simulated replicas, which go on serving the base name.
func TestSGLangDiskEndToEnd(t *testing.T) {
	r := testRecipe(t, "", append(slices.Clone(sglangSets), "sync.keep=1")...)
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	var out bytes.Buffer
	sum, err := (&Runner{Recipe: r, Deps: deps, Out: &out}).Run(ctx)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	urls := replicaURLs(deps)
	steps, err := (&results.RunDir{Path: r.Output.Dir}).ReadSteps()
	if err != nil || len(steps) != 2 || len(sum.Steps) != 2 {
		t.Fatalf("steps.jsonl: %v, %d records", err, len(steps))
	}
	a1, a2 := adapterIn(t, r.Output.Dir, 1), adapterIn(t, r.Output.Dir, 2)
	for i, want := range []string{"sim/base", a1} {
		s := steps[i]
		if s.SampledWith != want || s.PolicyLag != 0 || s.Adapter != adapterIn(t, r.Output.Dir, i+1) {
			t.Errorf("step %d: sampled with %q (lag %d), produced %q", s.Step, s.SampledWith, s.PolicyLag, s.Adapter)
		}
		if !reflect.DeepEqual(s.Replicas, servedBy(want, urls...)) {
			t.Errorf("step %d replicas %v, want both serving %s", s.Step, s.Replicas, want)
		}
	}
	// Each replica serves step 2's weights under the base name, loaded from
	// the directory the orchestrator unpacked; no adapter was loaded.
	wantDir, _ := filepath.Abs(filepath.Join(r.Sync.Dir, a2))
	trained, err := weights.ReadWeights(wantDir)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(trained, lm.InitialParams()) {
		t.Fatal("training did not change the weights")
	}
	// trainer.lora_rank 0 trains full weights: the trainer saved a model
	// export, not an adapter.
	if _, err := os.Stat(filepath.Join(wantDir, "config.json")); err != nil {
		t.Errorf("the synced weights are no full-weight export: %v", err)
	}
	if _, err := os.Stat(filepath.Join(wantDir, "adapter_config.json")); err == nil {
		t.Error("the synced weights are an adapter")
	}
	for i, p := range emb.Sim().Policies {
		got, ok := p.Params("sim/base")
		if !ok || !reflect.DeepEqual(got, trained) || p.WeightsPath() != wantDir {
			t.Errorf("replica %d serves weights from %q, want %s", i, p.WeightsPath(), wantDir)
		}
		if a := p.LoadedAdapters(); len(a) != 0 {
			t.Errorf("replica %d has adapters %v", i, a)
		}
	}
	// sync.keep 1: only the weights in use stay on disk.
	ents, _ := os.ReadDir(r.Sync.Dir)
	if len(ents) != 1 || ents[0].Name() != a2 {
		t.Errorf("sync.dir holds %v", ents)
	}
	// The evaluation after step 2 ran on step 2's weights.
	if !strings.Contains(out.String(), "eval step 2 (search, "+a2) || !strings.Contains(out.String(), "SIMULATED") {
		t.Errorf("output:\n%s", out.String())
	}
	// The simulator's adapters and full weights carry the same parameters:
	// a lora run sends the same batches and evaluates the same.
	lora, _ := runRecipe(t, testRecipe(t, "", "sync.kind=lora", "sim.trainer.backend=fsdp", "policy.urls=embedded,embedded", "eval.datasets.nq="), 1)
	if got, want := stepDigests(sum), stepDigests(lora); !slices.Equal(got, want) {
		t.Errorf("digests: sglang_disk %v, lora %v", got, want)
	}
	if evalsText(sum.Evals) != evalsText(lora.Evals) {
		t.Errorf("evals: sglang_disk %v, lora %v", sum.Evals, lora.Evals)
	}
}

// A run with sync.kind sglang_disk interrupted and resumed on fresh servers
// produces the same steps and evaluations as an uninterrupted one; the
// fresh replicas get the last weights before sampling.
func TestSGLangDiskResume(t *testing.T) {
	sets := append(slices.Clone(sglangSets), "train.steps=3", "eval.every=2")
	want, _ := runRecipe(t, testRecipe(t, "", sets...), 1)

	r := testRecipe(t, "", sets...)
	got, _, deps, emb := interruptThenResume(t, r, 2)
	digests := func(s *Summary) (ds []string) {
		for _, st := range s.Steps {
			ds = append(ds, fmt.Sprint(st.Step, st.BatchDigest, st.RewardMean, st.SampledWith))
		}
		return ds
	}
	if strings.Join(digests(got), ";") != strings.Join(digests(want), ";") {
		t.Fatalf("resumed %v\nwhole %v", digests(got), digests(want))
	}
	if evalsText(got.Evals) != evalsText(want.Evals) {
		t.Fatalf("evals: resumed %v\nwhole %v", got.Evals, want.Evals)
	}
	// Step 3 sampled on the fresh replicas with step 2's weights.
	if s := got.Steps[2]; !reflect.DeepEqual(s.Replicas, servedBy(got.Steps[1].Adapter, replicaURLs(deps)...)) {
		t.Errorf("resumed step 3 replicas %v", s.Replicas)
	}
	wantDir, _ := filepath.Abs(filepath.Join(r.Sync.Dir, got.Steps[2].Adapter))
	for i, p := range emb.Sim().Policies {
		if p.WeightsPath() != wantDir {
			t.Errorf("replica %d serves %q, want %s", i, p.WeightsPath(), wantDir)
		}
	}
}

// flakyLoads is a policy replica whose next loads (LoRA or full) of the
// weights whose name ends in failFor ("": any) fail on command.
type flakyLoads struct {
	policy.Policy
	failFor string
	fail    atomic.Int32
}

var errInjectedLoad = errors.New("injected load failure")

// failing reports whether a load of name fails, counting it.
func (f *flakyLoads) failing(name string) bool {
	return strings.HasSuffix(name, f.failFor) && f.fail.Add(-1) >= 0
}

func (f *flakyLoads) LoadLoRA(ctx context.Context, name, path string) error {
	if f.failing(name) {
		return errInjectedLoad
	}
	return f.Policy.LoadLoRA(ctx, name, path)
}

func (f *flakyLoads) UpdateWeightsFromDisk(ctx context.Context, path string) error {
	if f.failing(filepath.Base(path)) {
		return errInjectedLoad
	}
	return f.Policy.UpdateWeightsFromDisk(ctx, path)
}

// A replica that fails to load the new weights samples nothing with them
// until it loads them (retried before the next rollout, then at the next
// sync), then rejoins; with no replica holding them the step fails naming
// each replica and why. For both kinds that move weights.
func TestReplicaFailingLoadIsLeftOutThenRejoins(t *testing.T) {
	for kind, rank := range map[string]string{"lora": "4", "sglang_disk": "0"} {
		t.Run(kind, func(t *testing.T) {
			r := testRecipe(t, "", "sync.kind="+kind, "trainer.lora_rank="+rank, "sim.trainer.backend=fsdp", "policy.urls=embedded,embedded", "train.steps=3",
				"eval.datasets.nq=", "eval.datasets.hotpotqa=")
			ctx := context.Background()
			deps, emb, err := setup.Connect(ctx, r, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer emb.Close()
			urls := replicaURLs(deps)
			flaky := &flakyLoads{Policy: deps.Policies[1], failFor: "-step0001"}
			// The sync after step 1 and the retry before step 2 fail.
			flaky.fail.Store(2)
			deps.Policies[1] = flaky
			sum, err := (&Runner{Recipe: r, Deps: deps}).Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := []map[string]string{
				servedBy("sim/base", urls...),
				servedBy(adapterIn(t, r.Output.Dir, 1), urls[0]),
				servedBy(adapterIn(t, r.Output.Dir, 2), urls...),
			}
			for i, s := range sum.Steps {
				if !reflect.DeepEqual(s.Replicas, want[i]) {
					t.Errorf("step %d replicas %v, want %v", s.Step, s.Replicas, want[i])
				}
			}
			// Both failures were met; lora loads step 1's adapter once
			// more at step 2's sync (a kept adapter the replica lacks).
			wantLeft := int32(0)
			if kind == "lora" {
				wantLeft = -1
			}
			if n := flaky.fail.Load(); n != wantLeft {
				t.Errorf("fail counter %d, want %d", n, wantLeft)
			}

			// No replica loads the weights: the step fails, naming both.
			r2 := testRecipe(t, "", "sync.kind="+kind, "trainer.lora_rank="+rank, "sim.trainer.backend=fsdp", "policy.urls=embedded,embedded", "train.steps=1",
				"eval.datasets.nq=", "eval.datasets.hotpotqa=")
			deps2, emb2, err := setup.Connect(ctx, r2, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer emb2.Close()
			for i, p := range deps2.Policies {
				f := &flakyLoads{Policy: p, failFor: "-step0001"}
				f.fail.Store(1000)
				deps2.Policies[i] = f
			}
			_, err = (&Runner{Recipe: r2, Deps: deps2}).Run(ctx)
			for _, w := range append([]string{"step 1: sync: no policy replica holds weights " + adapterIn(t, r2.Output.Dir, 1) + ": ", errInjectedLoad.Error()}, replicaURLs(deps2)...) {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("no replica loads: %v lacks %q", err, w)
				}
			}
		})
	}
}

// syncCalls is a policy replica that counts its weight calls.
type syncCalls struct {
	policy.Policy
	n atomic.Int32
}

func (s *syncCalls) LoadLoRA(ctx context.Context, name, path string) error {
	s.n.Add(1)
	return s.Policy.LoadLoRA(ctx, name, path)
}

func (s *syncCalls) UnloadLoRA(ctx context.Context, name string) error {
	s.n.Add(1)
	return s.Policy.UnloadLoRA(ctx, name)
}

func (s *syncCalls) UpdateWeightsFromDisk(ctx context.Context, path string) error {
	s.n.Add(1)
	return s.Policy.UpdateWeightsFromDisk(ctx, path)
}

// With sync.kind none, orchestrate eval evaluates the served weights with
// no weight call at all, and a training run is refused before any step.
func TestSyncNoneEvaluatesWithoutSyncCalls(t *testing.T) {
	r := testRecipe(t, "", "sync.kind=none", "eval.datasets.nq=")
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	var counted []*syncCalls
	for i, p := range deps.Policies {
		c := &syncCalls{Policy: p}
		counted = append(counted, c)
		deps.Policies[i] = c
	}
	recs, err := Evaluate(ctx, r, deps, EvalOptions{Strategy: "search", Step: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Dataset != "hotpotqa" || recs[0].N != 4 || recs[0].Step != 0 {
		t.Errorf("records %+v", recs)
	}
	_, err = (&Runner{Recipe: r, Deps: deps, Overwrite: true}).Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "sync.kind") || !strings.Contains(err.Error(), "cannot train") {
		t.Errorf("training with sync.kind none: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.Output.Dir, "steps.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a step was recorded (%v)", err)
	}
	for i, c := range counted {
		if n := c.n.Load(); n != 0 {
			t.Errorf("replica %d: %d weight calls with sync.kind none", i, n)
		}
	}
}

// With sync.kind sglang_disk a replica killed mid-run and restarted (back
// on its initial weights) is drained, then re-admitted once the weights in
// use are loaded on it again; the batches equal a clean run's.
func TestSGLangDiskReplicaKilledAndRestarted(t *testing.T) {
	sets := append(slices.Clone(sglangSets), "train.steps=4", "eval.datasets.hotpotqa=",
		"http.retries=2", "http.retry_wait_min_ms=5", "http.retry_wait_max_ms=20")
	clean, _ := runRecipe(t, testRecipe(t, "", sets...), 1)

	r := testRecipe(t, "", sets...)
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	s := emb.Sim()
	restarted := make(chan error, 1)
	rn := &Runner{Recipe: r, Deps: deps}
	readmitted := false
	rn.afterStep = func(step int) {
		switch step {
		case 1:
			s.KillPolicy(0)
			go func() {
				time.Sleep(150 * time.Millisecond)
				restarted <- s.RestartPolicy(0)
			}()
		case 2:
			// Wait for replica 0's re-admission, so that steps 3 and 4
			// show it back.
			reps := rn.last.rollouts.Replicas
			for deadline := time.Now().Add(time.Minute); reps.Down(0) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			readmitted = !reps.Down(0)
		}
	}
	got, err := rn.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if !readmitted {
		t.Fatal("the restarted replica was not re-admitted within a minute")
	}
	if !slices.Equal(stepDigests(got), stepDigests(clean)) {
		t.Fatalf("digests %v, clean %v", stepDigests(got), stepDigests(clean))
	}
	// Re-admitted with the weights in use: it samples steps 3 and 4 with
	// them, and holds the last weights, not its initial ones.
	urls := replicaURLs(deps)
	for _, st := range got.Steps[2:] {
		if want := servedBy(st.SampledWith, urls...); !reflect.DeepEqual(st.Replicas, want) {
			t.Errorf("step %d replicas %v, want %v", st.Step, st.Replicas, want)
		}
	}
	wantDir, _ := filepath.Abs(filepath.Join(r.Sync.Dir, got.Steps[3].Adapter))
	if p := s.Policies[0]; p.WeightsPath() != wantDir {
		t.Errorf("restarted replica serves %q, want %s", p.WeightsPath(), wantDir)
	}
}

// hindsight.teacher initial with full-weight sync: the reference servers
// (reference.urls), which keep the initial weights, score the hinted
// teacher contexts, and the term is on; the policy servers, whose weights
// the syncs replace, score none of them.
func TestTeacherInitialOnReferenceServers(t *testing.T) {
	r := testRecipe(t, "reference: {urls: [embedded]}", append(slices.Clone(sglangSets),
		"hindsight.teacher=initial", "hindsight.student_logprobs=sampled", "trainer.kl_coef=0",
		"train.steps=2", "eval.datasets.hotpotqa=")...)
	if !r.TeacherOnReferences() {
		t.Fatal("the recipe does not score its teacher on the reference servers")
	}
	var refs, pols []*scoreCounter
	sum, out := runRecipeWith(t, r, 1, func(deps *roles.Deps, _ *setup.Embedded) {
		for i, p := range deps.References {
			sc := &scoreCounter{Policy: p}
			refs, deps.References[i] = append(refs, sc), sc
		}
		for i, p := range deps.Policies {
			sc := &scoreCounter{Policy: p}
			pols, deps.Policies[i] = append(pols, sc), sc
		}
	})
	critiques, opd := 0, 0
	for _, s := range sum.Steps {
		critiques += s.Critiques
		opd += s.OPDTokens
	}
	refCalls, polCalls := 0, 0
	for _, sc := range refs {
		refCalls += sc.calls
	}
	for _, sc := range pols {
		polCalls += sc.calls
	}
	// (A critiqued trajectory without search tokens has nothing to score.)
	if critiques == 0 || opd == 0 || refCalls == 0 || refCalls > critiques || polCalls != 0 {
		t.Fatalf("%d critiques, %d OPD tokens, %d teacher scores on the reference servers, %d on the policy servers: want the critiques scored on the references, none on the policy servers\n%s",
			critiques, opd, refCalls, polCalls, out)
	}
}
