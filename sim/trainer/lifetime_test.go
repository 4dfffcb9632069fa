package trainer

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// submitModel posts create_model of rank and returns the model id and
// the create future's outcome.
func submitModel(c apiClient, session string, seq, rank int) (string, int, map[string]any) {
	c.T.Helper()
	st, acc := c.Post("/api/v1/create_model", map[string]any{"session_id": session, "model_seq_id": seq, "base_model": testBase,
		"lora_config": map[string]any{"rank": rank}, "type": "create_model"})
	if st != http.StatusOK {
		c.T.Fatalf("create_model POST: %d %v (SkyRL accepts the POST and fails the future)", st, acc)
	}
	st, res := c.Result(acc["request_id"].(string))
	return acc["model_id"].(string), st, res
}

// With the FSDP backend the server holds one policy model: a second one
// fails inside its future with SkyRL's text, whatever its rank; calls on
// the refused model fail "not loaded"; unload_model frees the slot.
// With the JAX backend several LoRA models share the server and rank 0 is
// refused in the future with JAX's text.
func TestSimTrainerTenancy(t *testing.T) {
	f := getFixture(t)
	_, c, _ := newTrainerBackend(t, f, BackendFSDP, 0)
	session := createSession(c)
	first, st, res := submitModel(c, session, 0, 0)
	if st != http.StatusOK {
		t.Fatalf("first model: %d %v", st, res)
	}
	for _, tc := range []struct {
		rank int
		want string
	}{
		{0, "SkyRLTrainBackend already has a 'policy' model; multi-tenant training is only supported for LoRA (rank > 0)"},
		{8, "Cannot register an additional LoRA adapter: the first policy model was created without LoRA. Recreate the server with a LoRA-enabled first model."},
	} {
		id, st, res := submitModel(c, session, 1, tc.rank)
		if st != http.StatusBadRequest || res["detail"] != tc.want {
			t.Fatalf("second model of rank %d: %d %v", tc.rank, st, res)
		}
		// Listed (SkyRL's row stays), but not loaded.
		st, acc := c.Post("/api/v1/optim_step", map[string]any{"model_id": id, "seq_id": 1, "type": "optim_step",
			"adam_params": map[string]any{"learning_rate": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0}})
		if st != http.StatusOK {
			t.Fatalf("optim_step POST: %d %v", st, acc)
		}
		if st, res := c.Result(acc["request_id"].(string)); st != http.StatusBadRequest || res["detail"] != "Model "+id+" not loaded" {
			t.Fatalf("call on a refused model: %d %v", st, res)
		}
	}
	// unload_model: SkyRL's answer, then a future; unknown model 404.
	if st, body := c.Post("/api/v1/unload_model", map[string]any{"model_id": "nope"}); st != http.StatusNotFound || body["detail"] != "Model not found" {
		t.Fatalf("unknown model: %d %v", st, body)
	}
	res = c.Call("/api/v1/unload_model", map[string]any{"model_id": first, "type": "unload_model"})
	if res["model_id"] != first || res["status"] != "unloaded" {
		t.Fatalf("unload: %v", res)
	}
	// A model not loaded is answered the same (SkyRL's engine ignores it).
	if res := c.Call("/api/v1/unload_model", map[string]any{"model_id": first}); res["status"] != "unloaded" {
		t.Fatalf("second unload: %v", res)
	}
	if _, st, res := submitModel(c, session, 2, 0); st != http.StatusOK {
		t.Fatalf("after unload: %d %v", st, res)
	}
	// Two LoRA models in a row on FSDP: the adapter store refuses.
	_, c2, _ := newTrainerBackend(t, f, BackendFSDP, 0)
	s2 := createSession(c2)
	submitModel(c2, s2, 0, 8)
	if _, st, res := submitModel(c2, s2, 1, 8); st != http.StatusBadRequest || res["detail"] == nil {
		t.Fatalf("second LoRA on FSDP: %d %v", st, res)
	}

	_, cj, _ := newTrainerBackend(t, f, BackendJAX, 0)
	sj := createSession(cj)
	if _, st, res := submitModel(cj, sj, 0, 0); st != http.StatusBadRequest || res["detail"] != "LoRA rank 0 must be between 1 and 32" {
		t.Fatalf("JAX rank 0: %d %v", st, res)
	}
	for seq := 1; seq <= 2; seq++ {
		if _, st, res := submitModel(cj, sj, seq, 8); st != http.StatusOK {
			t.Fatalf("JAX LoRA model %d: %d %v", seq, st, res)
		}
	}
}

// The DELETE route answers as SkyRL's delete_checkpoint: the typed path,
// 400 for a bare name or another prefix, 422 for a bad id or name, 404
// with the id and name, 425 while the save runs, 204 after which the row
// and the file are gone; a failed checkpoint can be deleted. The
// archive route and weights_info say 500 "Checkpoint creation failed" for
// a failed one. CheckpointUsage counts what is on disk.
func TestSimTrainerDeleteCheckpoint(t *testing.T) {
	ts, c, ckpt := newTrainerBackend(t, getFixture(t), BackendFSDP, 300*time.Millisecond)
	session := createSession(c)
	mid, st, res := submitModel(c, session, 0, 0)
	if st != http.StatusOK {
		t.Fatalf("model: %d %v", st, res)
	}
	del := func(path string) (int, map[string]any) {
		c.T.Helper()
		req, _ := http.NewRequest(http.MethodDelete, c.Base+"/api/v1/training_runs/"+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = decodeJSONBody(resp, &body)
		return resp.StatusCode, body
	}
	// Pending: 425.
	st, acc := c.Post("/api/v1/save_weights", saveBody("save_weights", mid, "s1", 1))
	if st != http.StatusOK {
		t.Fatalf("save: %d %v", st, acc)
	}
	if st, body := del(mid + "/checkpoints/weights/s1"); st != http.StatusTooEarly || body["detail"] != "Checkpoint is still being created" {
		t.Fatalf("pending: %d %v", st, body)
	}
	c.Result(acc["request_id"].(string))
	c.Call("/api/v1/save_weights_for_sampler", saveBody("save_weights_for_sampler", mid, "w1", 2))
	if u := ts.CheckpointUsage(); u.States != 1 || u.Samplers != 1 || u.Bytes == 0 {
		t.Fatalf("usage %+v", u)
	}
	for _, tc := range []struct {
		path   string
		status int
		detail string
	}{
		{mid + "/checkpoints/s1", 400, "Invalid checkpoint identifier. Expected format 'weights/<name>' (training weights) or 'sampler_weights/<name>' (sampler weights), where <name> is a single path segment."},
		{mid + "/checkpoints/other/s1", 400, "Invalid checkpoint path: other/s1"},
		{mid + "/checkpoints/weights/a.b", 422, "Invalid checkpoint_id"},
		{"bad.id/checkpoints/weights/s1", 422, ""},
		{mid + "/checkpoints/weights/nope", 404, "Checkpoint not found: " + mid + "/nope"},
		{mid + "/checkpoints/sampler_weights/s1", 404, "Checkpoint not found: " + mid + "/s1"},
	} {
		st, body := del(tc.path)
		if st != tc.status || (tc.detail != "" && body["detail"] != tc.detail) {
			t.Errorf("DELETE %s: %d %v, want %d %q", tc.path, st, body, tc.status, tc.detail)
		}
	}
	for _, p := range []string{"weights/s1", "sampler_weights/w1"} {
		if st, body := del(mid + "/checkpoints/" + p); st != http.StatusNoContent {
			t.Fatalf("DELETE %s: %d %v", p, st, body)
		}
	}
	if u := ts.CheckpointUsage(); u.States != 0 || u.Samplers != 0 {
		t.Fatalf("usage after deletes %+v", u)
	}
	if _, err := os.Stat(filepath.Join(ckpt, mid, "s1.tar.gz")); !os.IsNotExist(err) {
		t.Fatalf("state file: %v", err)
	}
	if st, _ := del(mid + "/checkpoints/weights/s1"); st != http.StatusNotFound {
		t.Fatalf("second DELETE: %d", st)
	}
	if p := ts.PeakCheckpointUsage(); p.States != 1 || p.Samplers != 1 {
		t.Fatalf("peak %+v", p)
	}

	// A failed save (sampler_weights made a file, so its directory
	// cannot be made): 500 on the archive route, and deletable.
	_ = os.RemoveAll(filepath.Join(ckpt, mid, "sampler_weights"))
	if err := os.WriteFile(filepath.Join(ckpt, mid, "sampler_weights"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, acc = c.Post("/api/v1/save_weights_for_sampler", saveBody("save_weights_for_sampler", mid, "bad", 3))
	if st != http.StatusOK {
		t.Fatalf("save: %d %v", st, acc)
	}
	if st, _ := c.Result(acc["request_id"].(string)); st == http.StatusOK {
		t.Fatal("the save did not fail")
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
		Get(c.Base + "/api/v1/training_runs/" + mid + "/checkpoints/bad/archive")
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = decodeJSONBody(resp, &body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !detailPrefix(body["detail"], "Checkpoint creation failed: ") {
		t.Fatalf("archive of a failed checkpoint: %d %v", resp.StatusCode, body)
	}
	_ = os.Remove(filepath.Join(ckpt, mid, "sampler_weights"))
	if st, body := del(mid + "/checkpoints/sampler_weights/bad"); st != http.StatusNoContent {
		t.Fatalf("DELETE failed checkpoint: %d %v", st, body)
	}
	// weights_info: a completed state answers the model; a failed one 500.
	c.Call("/api/v1/save_weights", saveBody("save_weights", mid, "s2", 4))
	if st, body := c.Post("/api/v1/weights_info", map[string]any{"tinker_path": "tinker://" + mid + "/weights/s2"}); st != 200 || body["lora_rank"] != 0.0 {
		t.Fatalf("weights_info: %d %v", st, body)
	}
	// A completed sampler archive: 302 to its download.
	c.Call("/api/v1/save_weights_for_sampler", saveBody("save_weights_for_sampler", mid, "ok", 5))
	resp, err = (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
		Get(c.Base + "/api/v1/training_runs/" + mid + "/checkpoints/ok/archive")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/api/v1/training_runs/"+mid+"/checkpoints/ok/download" {
		t.Fatalf("archive: %d %v", resp.StatusCode, resp.Header)
	}
}

func detailPrefix(v any, p string) bool {
	s, ok := v.(string)
	return ok && len(s) >= len(p) && s[:len(p)] == p
}

func decodeJSONBody(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }

// SkyRL's stale-session cleanup: the models of a session silent for
// longer than SessionTimeout are unloaded and the session expired, which
// frees an FSDP server for the next run; an expired session still takes
// heartbeats and is not cleaned twice; a live session's model stays.
func TestSimTrainerStaleSessionCleanup(t *testing.T) {
	ts, c, _ := newTrainerBackend(t, getFixture(t), BackendFSDP, 0)
	if ts.SessionTimeout != 300*time.Second || ts.CleanupInterval != 60*time.Second {
		t.Fatalf("defaults %v / %v, want SkyRL's 300 s / 60 s", ts.SessionTimeout, ts.CleanupInterval)
	}
	killed := createSession(c)
	held, st, res := submitModel(c, killed, 0, 0)
	if st != http.StatusOK {
		t.Fatalf("model: %d %v", st, res)
	}
	next := createSession(c)
	if _, st, res := submitModel(c, next, 0, 0); st != http.StatusBadRequest {
		t.Fatalf("second model while the first is held: %d %v", st, res)
	}
	// Within the timeout nothing happens.
	if n := ts.cleanupStaleSessions(time.Now().Add(299 * time.Second)); n != 0 {
		t.Fatalf("cleaned %d models of sessions heard from 299 s ago", n)
	}
	// Keep next alive; killed stops its heartbeat.
	later := time.Now().Add(301 * time.Second)
	ts.mu.Lock()
	ts.sessions[next] = later
	ts.mu.Unlock()
	if n := ts.cleanupStaleSessions(later); n != 1 {
		t.Fatalf("cleanup asked to unload %d models, want the silent session's one", n)
	}
	// The worker runs futures in order: once this create answers, the
	// unload before it has run.
	mid, st, res := submitModel(c, next, 1, 0)
	if st != http.StatusOK {
		t.Fatalf("model after the cleanup: %d %v", st, res)
	}
	if ts.ModelLoaded(held) || !ts.ModelLoaded(mid) {
		t.Errorf("loaded: stale %v, new %v", ts.ModelLoaded(held), ts.ModelLoaded(mid))
	}
	if st, body := c.Post("/api/v1/session_heartbeat", map[string]any{"session_id": killed, "type": "session_heartbeat"}); st != http.StatusOK {
		t.Errorf("heartbeat of an expired session: %d %v", st, body)
	}
	ts.mu.Lock()
	ts.sessions[next] = later.Add(time.Hour)
	ts.mu.Unlock()
	if n := ts.cleanupStaleSessions(later.Add(time.Hour)); n != 0 {
		t.Errorf("an expired session cleaned again (%d), or the live one's model taken", n)
	}
}
