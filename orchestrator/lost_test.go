package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/sim"
)

// loseTrainerAnswers makes the embedded trainer do the work of the first
// request to each call SkyRL does not de-duplicate, then drop its answer.
func loseTrainerAnswers() setup.Option {
	return setup.WithSimFaults(func(f *sim.RoleFaults) {
		f.Trainer = sim.Faults{Rate: 1, Kinds: []string{"lost"}, PerRoute: 1, Routes: []string{
			"/api/v1/create_model", "/api/v1/save_weights_for_sampler", "/api/v1/save_weights", "/api/v1/load_weights"}}
	})
}

// A run whose trainer drops the answer of create_model, of the first
// save_weights_for_sampler and save_weights, and, once resumed, of
// create_model and load_weights again (the server did the work each time),
// recognises the work as done: it trains one model per run and sends the
// trainer the batches of a run without faults.
func TestLostTrainerAnswersDoNotChangeBatches(t *testing.T) {
	sets := []string{"train.steps=4", "eval.every=2", "eval.datasets.nq=", "http.retry_wait_min_ms=1", "http.retry_wait_max_ms=20"}
	want, _ := runRecipe(t, testRecipe(t, "", sets...), 1)

	r := testRecipe(t, "", sets...)
	// models counts the trainer's models (GET training_runs).
	models := func(deps roles.Deps) int {
		resp, err := http.Get(deps.Trainer.URL() + "/api/v1/training_runs?limit=100&offset=0")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var page struct {
			Runs []any `json:"training_runs"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			t.Fatal(err)
		}
		return len(page.Runs)
	}
	// The first run stops after step 2.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deps, emb, err := setup.Connect(context.Background(), r, nil, nil, loseTrainerAnswers())
	if err != nil {
		t.Fatal(err)
	}
	rn := &Runner{Recipe: r, Deps: deps, afterStep: func(step int) {
		if step == 2 {
			cancel()
		}
	}}
	if _, err := rn.Run(ctx); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("the interrupted run: %v", err)
	}
	if n, m := emb.FaultsInjected(), models(deps); n != 3 || m != 1 {
		t.Fatalf("first run: %d answers lost (want create_model and one of each save), %d models on the trainer (want 1)", n, m)
	}
	emb.Close()

	// The resumed run, on a fresh trainer, loses create_model's,
	// load_weights' and the saves' answers again.
	deps, emb, err = setup.Connect(context.Background(), r, nil, nil, loseTrainerAnswers())
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	var out bytes.Buffer
	got, err := (&Runner{Recipe: r, Deps: deps, Resume: true, Out: &out}).Run(context.Background())
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	if n, m := emb.FaultsInjected(), models(deps); n != 4 || m != 1 {
		t.Fatalf("resumed run: %d answers lost (want 4), %d models on the trainer (want 1)", n, m)
	}
	digests := func(s *Summary) (ds []string) {
		for _, st := range s.Steps {
			ds = append(ds, fmt.Sprint(st.Step, " ", st.BatchDigest))
		}
		return ds
	}
	if g, w := strings.Join(digests(got), "; "), strings.Join(digests(want), "; "); g != w {
		t.Fatalf("batches with lost answers\n%s\nwithout faults\n%s", g, w)
	}
	if evalsText(got.Evals) != evalsText(want.Evals) {
		t.Fatalf("evals: with lost answers %v\nwithout faults %v", got.Evals, want.Evals)
	}
}
