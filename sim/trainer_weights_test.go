package sim

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/trainer"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// TestSaveWeightsLoadIntoPolicy trains a step, saves sampler weights,
// unpacks the archive, hot-loads it into a policy server as a LoRA adapter
// and checks that completions under the adapter's name use the trained
// parameters.
func TestSaveWeightsLoadIntoPolicy(t *testing.T) {
	f := getFixture(t)
	ts, c, ckpt := newTrainer(t, f)
	session := createSession(c)
	mid := createModel(c, session, 0)
	tr := trainTrajectory(t, f, 7)
	c.Call("/api/v1/forward_backward", fbBody(mid, 1, "importance_sampling", nil, datum(tr, 1, 0)))
	c.Call("/api/v1/optim_step", optimBody(mid, 2, 0.05))
	res := c.Call("/api/v1/save_weights_for_sampler", map[string]any{"model_id": mid, "path": "step_1", "seq_id": 3, "type": "save_weights_for_sampler"})
	if want := "tinker://" + mid + "/step_1"; res["path"] != want {
		t.Errorf("save path %v, want %s", res["path"], want)
	}
	archive := filepath.Join(ckpt, mid, "sampler_weights", "step_1.tar.gz")
	dir := filepath.Join(t.TempDir(), "step_1")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if names := unpackArchive(t, archive, dir); !slices.Equal(names, []string{"adapter_config.json", "adapter_model.safetensors"}) {
		t.Errorf("archive holds %v", names)
	}
	var cfg map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg["peft_type"] != "LORA" || cfg["base_model_name_or_path"] != testBase || cfg["r"] != 8.0 {
		t.Errorf("adapter_config.json: %v %v", cfg, err)
	}
	trained, _ := ts.ModelParams(mid)
	loaded, err := weights.ReadAdapter(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range trained {
		if loaded[i] != float64(float32(trained[i])) {
			t.Errorf("adapter param %s = %v, trained %v", lm.ParamNames[i], loaded[i], trained[i])
		}
	}

	ps := NewPolicyServer(f.model, testBase)
	srv := httptest.NewServer(ps.Handler())
	t.Cleanup(srv.Close)
	pc := apiClient{T: t, Base: srv.URL}
	st, body := pc.Post("/v1/load_lora_adapter", map[string]any{"lora_name": "step_1", "lora_path": dir})
	if st != http.StatusOK {
		t.Fatalf("load_lora_adapter: %d %v", st, body)
	}
	if st, body := pc.Post("/v1/load_lora_adapter", map[string]any{"lora_name": "step_1", "lora_path": dir}); st != http.StatusBadRequest {
		t.Errorf("loading step_1 twice: %d %v, want 400", st, body)
	}
	if st, body := pc.Post("/v1/load_lora_adapter", map[string]any{"lora_name": "other", "lora_path": t.TempDir()}); st != http.StatusNotFound {
		t.Errorf("loading an empty directory: %d %v, want vLLM's 404", st, body)
	}
	_, models := pc.Get("/v1/models")
	var ids []string
	for _, m := range models["data"].([]any) {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	if !slices.Equal(ids, []string{testBase, "step_1"}) {
		t.Errorf("/v1/models lists %v", ids)
	}
	if p, ok := ps.Params("step_1"); !ok || !slices.Equal(p, loaded) {
		t.Errorf("served params %v, want %v", p, loaded)
	}

	_, base := promptLogprobs(t, pc, testBase, tr.IDs)
	_, lora := promptLogprobs(t, pc, "step_1", tr.IDs)
	wantBase, wantLoRA, wantTrained := f.model.Score(lm.InitialParams(), tr.IDs), f.model.Score(loaded, tr.IDs), f.model.Score(trained, tr.IDs)
	differs := false
	for i := 1; i < len(tr.IDs); i++ {
		if base[i] != wantBase[i] || lora[i] != wantLoRA[i] {
			t.Fatalf("position %d: served %v / %v, Score %v / %v", i, base[i], lora[i], wantBase[i], wantLoRA[i])
		}
		if math.Abs(lora[i]-wantTrained[i]) > 1e-5*(1+math.Abs(wantTrained[i])) {
			t.Errorf("position %d: adapter logprob %v, trained model's %v", i, lora[i], wantTrained[i])
		}
		if math.Abs(lora[i]-base[i]) > 1e-4 {
			differs = true
		}
	}
	if !differs {
		t.Error("the adapter scores the trajectory like the base model")
	}
	if st, _ := promptLogprobs(t, pc, "nope", tr.IDs); st != http.StatusNotFound {
		t.Errorf("unknown model: %d, want 404", st)
	}
	if st, body := pc.Post("/v1/unload_lora_adapter", map[string]any{"lora_name": testBase}); st != http.StatusNotFound {
		t.Errorf("unloading the base model: %d %v, want 404", st, body)
	}
	if st, body := pc.Post("/v1/unload_lora_adapter", map[string]any{"lora_name": "step_1"}); st != http.StatusOK {
		t.Errorf("unload: %d %v", st, body)
	}
	if st, _ := promptLogprobs(t, pc, "step_1", tr.IDs); st != http.StatusNotFound {
		t.Errorf("unloaded adapter: %d, want 404", st)
	}
}

// The trainer's test helpers this package's tests use (a copy of
// sim/trainer's, trainer/server_test.go: keep them alike).

// newTrainer starts a simulated trainer over httptest.
func newTrainer(t *testing.T, f *fixture) (*trainer.Server, apiClient, string) {
	t.Helper()
	ckpt := t.TempDir()
	ts := trainer.NewServer(f.model, testBase, ckpt)
	ts.PollWait = 20 * time.Millisecond
	t.Cleanup(ts.Close)
	srv := httptest.NewServer(ts.Handler())
	t.Cleanup(srv.Close)
	return ts, apiClient{T: t, Base: srv.URL}, ckpt
}

// trainTrajectory samples a trajectory of a HotpotQA question that
// searches, reads the real retriever's passages and answers.
func trainTrajectory(t *testing.T, f *fixture, qi int) trajectory {
	t.Helper()
	docs := bm25Docs(t)
	for seed := uint64(0); seed < 200; seed++ {
		tr := rollout(f.model, lm.InitialParams(), f.hotpot[qi].Q, "", trainSampling(), rand.New(rand.NewPCG(seed, 5)), 4, docs)
		if len(tr.Queries) >= 1 && tr.Answered {
			return tr
		}
	}
	t.Fatal("no searching trajectory in 200 seeds")
	return trajectory{}
}
