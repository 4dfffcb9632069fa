package trainer

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/sim/weights"
)

// createModelRank creates a model of the given rank and returns its id.
func createModelRank(c apiClient, session string, seq, rank int) string {
	c.T.Helper()
	res := c.Call("/api/v1/create_model", map[string]any{"session_id": session, "model_seq_id": seq, "base_model": testBase,
		"lora_config": map[string]any{"rank": rank}, "type": "create_model"})
	return res["model_id"].(string)
}

func saveBody(route, model, name string, seq int) map[string]any {
	b := map[string]any{"model_id": model, "path": name, "seq_id": seq}
	if route == "save_weights" {
		b["type"] = "save_weights"
	}
	return b
}

// As SkyRL's create_model, the same request twice makes two models, both
// listed by GET training_runs with their base model and rank; the POST
// answer names the model.
func TestSimTrainerCreateModelTwiceMakesTwoModels(t *testing.T) {
	_, c, _ := newTrainer(t, getFixture(t))
	session := createSession(c)
	body := map[string]any{"session_id": session, "model_seq_id": 0, "base_model": testBase,
		"lora_config": map[string]any{"rank": 0}, "type": "create_model"}
	st1, a := c.Post("/api/v1/create_model", body)
	st2, b := c.Post("/api/v1/create_model", body)
	if st1 != http.StatusOK || st2 != http.StatusOK || a["model_id"] == b["model_id"] || a["model_id"] == nil {
		t.Fatalf("two create_model: %d %v, %d %v: want two models", st1, a, st2, b)
	}
	if a["status"] != "created" || a["base_model"] != testBase || a["request_id"] == nil {
		t.Errorf("create_model answer %v", a)
	}
	st, runs := c.Get("/api/v1/training_runs?limit=100&offset=0")
	if st != http.StatusOK {
		t.Fatalf("training_runs: %d %v", st, runs)
	}
	list := runs["training_runs"].([]any)
	if len(list) != 2 {
		t.Fatalf("training_runs lists %d models, want 2: %v", len(list), runs)
	}
	for i, want := range []any{a["model_id"], b["model_id"]} {
		r := list[i].(map[string]any)
		if r["training_run_id"] != want || r["base_model"] != testBase || r["lora_rank"] != 0.0 || r["is_lora"] != true {
			t.Errorf("run %d: %v", i, r)
		}
	}
	if cur := runs["cursor"].(map[string]any); cur["total_count"] != 2.0 || cur["limit"] != 100.0 || cur["offset"] != 0.0 {
		t.Errorf("cursor %v", cur)
	}
}

// GET training_runs pages by limit and offset (default 20 and 0, as
// SkyRL's), and a page past the end has total_count 0.
func TestSimTrainerTrainingRunsPages(t *testing.T) {
	_, c, _ := newTrainer(t, getFixture(t))
	session := createSession(c)
	var ids []string
	for i := range 3 {
		ids = append(ids, createModelRank(c, session, i, 8))
	}
	_, page := c.Get("/api/v1/training_runs?limit=2&offset=1")
	list := page["training_runs"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["training_run_id"] != ids[1] || page["cursor"].(map[string]any)["total_count"] != 3.0 {
		t.Errorf("limit 2 offset 1: %v", page)
	}
	_, page = c.Get("/api/v1/training_runs")
	if cur := page["cursor"].(map[string]any); len(page["training_runs"].([]any)) != 3 || cur["limit"] != 20.0 || cur["offset"] != 0.0 {
		t.Errorf("defaults: %v", page)
	}
	_, page = c.Get("/api/v1/training_runs?limit=5&offset=3")
	if len(page["training_runs"].([]any)) != 0 || page["cursor"].(map[string]any)["total_count"] != 0.0 {
		t.Errorf("past the end: %v", page)
	}
	if st, body := c.Get("/api/v1/training_runs?limit=x"); st != http.StatusUnprocessableEntity {
		t.Errorf("limit x: %d %v", st, body)
	}
}

// A save under a name the model already has is 409 "Checkpoint '<name>'
// already exists for model '<id>'", even as an exact repeat (same seq_id
// and body): SkyRL does not de-duplicate saves. The first is listed as
// completed with SkyRL's tinker_path.
func TestSimTrainerSaveWeightsForSamplerTwiceIs409(t *testing.T) {
	testSaveTwiceIs409(t, "save_weights_for_sampler", "sampler", "sampler_weights")
}

// The same for save_weights (a training state).
func TestSimTrainerSaveWeightsTwiceIs409(t *testing.T) {
	testSaveTwiceIs409(t, "save_weights", "training", "weights")
}

func testSaveTwiceIs409(t *testing.T, route, kind, pathKind string) {
	_, c, _ := newTrainer(t, getFixture(t))
	mid := createModelRank(c, createSession(c), 0, 8)
	c.Call("/api/v1/"+route, saveBody(route, mid, "s1", 1))
	want := fmt.Sprintf("Checkpoint 's1' already exists for model '%s'", mid)
	for _, seq := range []int{1, 2} {
		st, body := c.Post("/api/v1/"+route, saveBody(route, mid, "s1", seq))
		if st != http.StatusConflict || body["detail"] != want {
			t.Errorf("repeat with seq_id %d: %d %v, want 409 %q", seq, st, body, want)
		}
	}
	// The refused repeats used no seq_id: the next call is seq_id 2.
	c.Call("/api/v1/optim_step", optimBody(mid, 2, 0.01))
	_, list := c.Get("/api/v1/training_runs/" + mid + "/checkpoints")
	cks := list["checkpoints"].([]any)
	if len(cks) != 1 {
		t.Fatalf("checkpoints %v", list)
	}
	ck := cks[0].(map[string]any)
	if ck["checkpoint_id"] != "s1" || ck["checkpoint_type"] != kind || ck["tinker_path"] != "tinker://"+mid+"/"+pathKind+"/s1" || ck["time"] == nil {
		t.Errorf("checkpoint %v", ck)
	}
}

// GET training_runs/{id}/checkpoints lists only completed checkpoints (a
// save still running is not there), nothing for an unknown model, and
// refuses an id outside SkyRL's pattern with 422.
func TestSimTrainerCheckpointsListsCompletedOnly(t *testing.T) {
	ts, c, _ := newTrainer(t, getFixture(t))
	mid := createModelRank(c, createSession(c), 0, 8)
	ts.StepDelay = 300 * time.Millisecond
	st, acc := c.Post("/api/v1/save_weights", saveBody("save_weights", mid, "s1", 1))
	if st != http.StatusOK {
		t.Fatalf("save_weights: %d %v", st, acc)
	}
	if _, list := c.Get("/api/v1/training_runs/" + mid + "/checkpoints"); len(list["checkpoints"].([]any)) != 0 {
		t.Errorf("a pending save is listed: %v", list)
	}
	c.Result(acc["request_id"].(string))
	if _, list := c.Get("/api/v1/training_runs/" + mid + "/checkpoints"); len(list["checkpoints"].([]any)) != 1 {
		t.Errorf("the completed save is not listed: %v", list)
	}
	if st, list := c.Get("/api/v1/training_runs/sim-model-999/checkpoints"); st != http.StatusOK || len(list["checkpoints"].([]any)) != 0 {
		t.Errorf("unknown model: %d %v", st, list)
	}
	if st, _ := c.Get("/api/v1/training_runs/a.b/checkpoints"); st != http.StatusUnprocessableEntity {
		t.Errorf("bad id: %d, want 422", st)
	}
}

// load_weights is permitted only as a model's first request after
// create_model: a repeat, or a load after another call, is 400
// "LoadWeights is not permitted with seq_id N"; a checkpoint that does not
// exist is 404, a path of another form 400.
func TestSimTrainerLoadWeightsOnlyAsFirstRequest(t *testing.T) {
	_, c, _ := newTrainer(t, getFixture(t))
	session := createSession(c)
	src := createModelRank(c, session, 0, 8)
	c.Call("/api/v1/save_weights", saveBody("save_weights", src, "s1", 1))
	load := func(model string, seq int, path string) map[string]any {
		return map[string]any{"model_id": model, "path": path, "optimizer": true, "seq_id": seq, "type": "load_weights"}
	}
	dst := createModelRank(c, session, 1, 8)
	path := "tinker://" + src + "/weights/s1"
	c.Call("/api/v1/load_weights", load(dst, 1, path))
	for _, seq := range []int{1, 2} {
		st, body := c.Post("/api/v1/load_weights", load(dst, seq, path))
		if want := fmt.Sprintf("LoadWeights is not permitted with seq_id %d", seq); st != http.StatusBadRequest || body["detail"] != want {
			t.Errorf("second load (seq_id %d): %d %v, want 400 %q", seq, st, body, want)
		}
	}
	// After another call on a fresh model.
	other := createModelRank(c, session, 2, 8)
	c.Call("/api/v1/optim_step", optimBody(other, 1, 0.01))
	if st, body := c.Post("/api/v1/load_weights", load(other, 2, path)); st != http.StatusBadRequest {
		t.Errorf("load after optim_step: %d %v", st, body)
	}
	fresh := createModelRank(c, session, 3, 8)
	if st, body := c.Post("/api/v1/load_weights", load(fresh, 1, "tinker://"+src+"/weights/nope")); st != http.StatusNotFound ||
		body["detail"] != "Checkpoint not found: "+src+"/nope" {
		t.Errorf("unknown checkpoint: %d %v", st, body)
	}
	if st, body := c.Post("/api/v1/load_weights", load(fresh, 1, "tinker://"+src+"/sampler_weights/s1")); st != http.StatusBadRequest {
		t.Errorf("a sampler path: %d %v", st, body)
	}
	// The refusals made no request on the model: a good load still works.
	c.Call("/api/v1/load_weights", load(fresh, 1, path))
}

// A rank-0 model (full fine-tuning, as on SkyRL's FSDP backend) saves its
// sampler weights as a full-weight model export (config.json and
// model.safetensors, no adapter), which /update_weights_from_disk reads; a
// LoRA model saves an adapter.
func TestSimTrainerRankZeroSavesFullWeights(t *testing.T) {
	for _, tc := range []struct {
		rank  int
		files []string
	}{{0, []string{"config.json", "model.safetensors"}}, {8, []string{"adapter_config.json", "adapter_model.safetensors"}}} {
		// Rank 0 needs the FSDP backend (JAX refuses it).
		ts, c, ckpt := newTrainerBackend(t, getFixture(t), BackendFSDP, 0)
		session := createSession(c)
		mid := createModelRank(c, session, tc.rank, tc.rank)
		c.Call("/api/v1/save_weights_for_sampler", saveBody("save_weights_for_sampler", mid, "w", 1))
		dir := t.TempDir()
		names := unpackArchive(t, filepath.Join(ckpt, mid, "sampler_weights", "w.tar.gz"), dir)
		if !slices.Equal(names, tc.files) {
			t.Errorf("rank %d: archive holds %v, want %v", tc.rank, names, tc.files)
		}
		got, err := weights.ReadWeights(dir)
		want, _ := ts.ModelParams(mid)
		if err != nil || len(got) != len(want) {
			t.Fatalf("rank %d: weights.ReadWeights: %v (%d params)", tc.rank, err, len(got))
		}
	}
}

// A save refused after its name was checked (a seq_id out of order)
// records nothing, as SkyRL rolls the refused request back: the name is
// free for the next, good attempt.
func TestSimTrainerRefusedSaveKeepsTheNameFree(t *testing.T) {
	_, c, _ := newTrainer(t, getFixture(t))
	mid := createModelRank(c, createSession(c), 0, 8)
	if st, body := c.Post("/api/v1/save_weights", saveBody("save_weights", mid, "s1", 5)); st != http.StatusBadRequest {
		t.Fatalf("seq_id 5 first: %d %v, want 400", st, body)
	}
	c.Call("/api/v1/save_weights", saveBody("save_weights", mid, "s1", 1))
}
