package orchestrator

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/doctor"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/results"
)

// SGLang serves its model under the path of the last successful
// /update_weights_from_disk. Against replicas a run left renamed, doctor
// says so, a resumed run reloads the weights its state names, and a second
// fresh run reloads policy.model first, so its first step samples the base
// weights as the first run's did.
func TestSGLangRenamedReplicasResumeAndSecondRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three short trainings")
	}
	sets := append(slices.Clone(sglangSets), "policy.server=sglang", "policy.tokenize=local", "sync.keep=1")
	r := testRecipe(t, "", sets...)
	ctx := context.Background()
	deps, emb, err := setup.Connect(ctx, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	var out bytes.Buffer
	if _, err := (&Runner{Recipe: r, Deps: deps, Out: &out}).Run(ctx); err != nil {
		t.Fatalf("first run: %v\n%s", err, out.String())
	}
	first, err := (&results.RunDir{Path: r.Output.Dir}).ReadSteps()
	if err != nil || len(first) != 2 {
		t.Fatalf("first run steps: %v %d", err, len(first))
	}
	a2 := first[1].Adapter
	loaded, _ := filepath.Abs(filepath.Join(r.Sync.Dir, a2))
	for i, p := range deps.Policies {
		models, err := p.Models(ctx)
		if err != nil || !slices.Equal(models, []string{loaded}) {
			t.Fatalf("replica %d serves %v (%v), want only %s (SGLang's rename)", i, models, err, loaded)
		}
	}
	// Doctor and preflight accept the renamed replicas and say why.
	rep := doctor.Run(ctx, r, deps, doctor.Options{})
	for _, c := range rep.Checks {
		if c.Role == "policy" && c.Name == "models" && (c.Status != doctor.CheckOK || !strings.Contains(c.Detail, "serves weights loaded from "+loaded+", this run's sync.dir (SGLang renames the model after /update_weights_from_disk)")) {
			t.Errorf("doctor models row: %+v", c)
		}
	}
	if err := doctor.Preflight(ctx, r, deps); err != nil {
		t.Fatalf("preflight on renamed replicas: %v", err)
	}

	// --resume with one more step reloads step 2's weights (the replicas
	// already report that path) and samples step 3 with them.
	r.Train.Steps = 3
	out.Reset()
	if _, err := (&Runner{Recipe: r, Deps: deps, Resume: true, Out: &out}).Run(ctx); err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	steps, err := (&results.RunDir{Path: r.Output.Dir}).ReadSteps()
	if err != nil || len(steps) != 3 || steps[2].SampledWith != a2 {
		t.Fatalf("resumed steps: %v %+v", err, steps)
	}

	// A fresh run on the renamed replicas (same sync.dir, another output
	// directory) samples its first step from the base weights again.
	r2 := testRecipe(t, "", sets...)
	r2.Sync.Dir = r.Sync.Dir
	r2.Trainer.CheckpointsDir = r.Trainer.CheckpointsDir
	out.Reset()
	if _, err := (&Runner{Recipe: r2, Deps: deps, Out: &out}).Run(ctx); err != nil {
		t.Fatalf("second run: %v\n%s", err, out.String())
	}
	second, err := (&results.RunDir{Path: r2.Output.Dir}).ReadSteps()
	if err != nil || len(second) != 2 {
		t.Fatalf("second run steps: %v %d", err, len(second))
	}
	if second[0].SampledWith != "sim/base" || second[0].BatchDigest != first[0].BatchDigest {
		t.Errorf("second run step 1 sampled with %s, digest %s; the first run's step 1: %s", second[0].SampledWith, second[0].BatchDigest, first[0].BatchDigest)
	}
}
