package trainer

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
)

// UnloadModel posts SkyRL's body and waits for the future; an unknown
// model (404) is already released.
func TestUnloadModel(t *testing.T) {
	tk := newTinker(t)
	tk.Handle("/api/v1/unload_model", func(w http.ResponseWriter, _ *http.Request, raw []byte) {
		tk.mu.Lock()
		tk.results["unload-1"] = map[string]any{"model_id": "m1", "status": "unloaded", "type": "unload_model"}
		tk.mu.Unlock()
		fake.WriteJSON(w, 200, map[string]any{"request_id": "unload-1", "model_id": "m1"})
	})
	c := newClient(t, tk, "")
	if err := c.UnloadModel(context.Background(), "m1"); err != nil {
		t.Fatal(err)
	}
	reqs := bodies(tk, "unload_model")
	if len(reqs) != 1 || reqs[0].Method != http.MethodPost {
		t.Fatalf("requests %+v", reqs)
	}
	fake.AssertJSON(t, reqs[0].Body, `{"model_id":"m1","type":"unload_model"}`)
	polls := bodies(tk, "retrieve_future")
	if len(polls) != 1 {
		t.Fatalf("%d polls, want the future resolved once", len(polls))
	}
	fake.AssertJSON(t, polls[0].Body, `{"request_id":"unload-1"}`)

	tk.HandleJSON("/api/v1/unload_model", 404, map[string]any{"detail": "Model not found"})
	if err := c.UnloadModel(context.Background(), "gone"); err != nil {
		t.Fatalf("unknown model: %v, want nil", err)
	}
	// A failed future is an error.
	tk.Handle("/api/v1/unload_model", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		fake.WriteJSON(w, 200, map[string]any{"request_id": "unload-2", "model_id": "m2"})
	})
	tk.queuePolls(canned{400, `{"detail":"boom"}`})
	if err := c.UnloadModel(context.Background(), "m2"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failed future: %v", err)
	}
}

// DeleteCheckpoint sends DELETE with no body to the typed route; 404 is
// done, 425 is asked again (bounded), anything else is an error, and bad
// ids send nothing.
func TestDeleteCheckpoint(t *testing.T) {
	tk := newTinker(t)
	route := "/api/v1/training_runs/model_ab12/checkpoints/weights/run-state0003"
	tk.Handle(route, func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(http.StatusNoContent) })
	c := newClient(t, tk, apiKey)
	c.ListWaitMax = 2 * time.Millisecond
	ctx := context.Background()
	if err := c.DeleteCheckpoint(ctx, "model_ab12", "weights/run-state0003"); err != nil {
		t.Fatal(err)
	}
	reqs := tk.Requests(route)
	if len(reqs) != 1 || reqs[0].Method != http.MethodDelete || len(reqs[0].Body) != 0 || reqs[0].Header.Get("X-API-Key") != apiKey {
		t.Fatalf("requests %+v", reqs)
	}

	// 425 twice, then 204: three DELETEs.
	sroute := "/api/v1/training_runs/model_ab12/checkpoints/sampler_weights/run-step0002"
	tk.Handle(sroute, func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(http.StatusNoContent) })
	tk.FailNext(sroute, 2, http.StatusTooEarly, nil, `{"detail":"Checkpoint is still being created"}`)
	if err := c.DeleteCheckpoint(ctx, "model_ab12", "sampler_weights/run-step0002"); err != nil {
		t.Fatal(err)
	}
	if n := len(tk.Requests(sroute)); n != 3 {
		t.Fatalf("%d DELETEs, want 3", n)
	}
	// Always 425: DeleteTries DELETEs, then an error.
	c.DeleteTries = 3
	tk.FailNext(sroute, 10, http.StatusTooEarly, nil, `{"detail":"Checkpoint is still being created"}`)
	before := len(tk.Requests(sroute))
	if err := c.DeleteCheckpoint(ctx, "model_ab12", "sampler_weights/run-step0002"); err == nil || !strings.Contains(err.Error(), "still being saved after 3 tries") {
		t.Fatalf("err %v", err)
	}
	if n := len(tk.Requests(sroute)) - before; n != 3 {
		t.Fatalf("%d DELETEs, want 3", n)
	}
	// 404: gone already.
	tk.HandleJSON("/api/v1/training_runs/model_ab12/checkpoints/weights/gone", 404, map[string]any{"detail": "Checkpoint not found: model_ab12/gone"})
	if err := c.DeleteCheckpoint(ctx, "model_ab12", "weights/gone"); err != nil {
		t.Fatalf("404: %v", err)
	}
	// 400: an error naming the checkpoint.
	tk.HandleJSON("/api/v1/training_runs/model_ab12/checkpoints/weights/bad", 400, map[string]any{"detail": "Invalid checkpoint path"})
	if err := c.DeleteCheckpoint(ctx, "model_ab12", "weights/bad"); err == nil || !strings.Contains(err.Error(), "model_ab12/weights/bad") {
		t.Fatalf("400: %v", err)
	}
	// Bad ids: nothing sent.
	n := len(tk.Requests(""))
	for _, tc := range [][2]string{{"model_ab12", "run-state0003"}, {"model_ab12", "other/x"}, {"model_ab12", "weights/../x"}, {"../x", "weights/a"}, {"", "weights/a"}} {
		if err := c.DeleteCheckpoint(ctx, tc[0], tc[1]); err == nil {
			t.Errorf("%v: no error", tc)
		}
	}
	if len(tk.Requests("")) != n {
		t.Error("a bad id was sent")
	}
}

// A save whose first attempt landed but whose checkpoint then failed on
// the server fails at once, with SkyRL's reason, instead of waiting for a
// listing that never comes; a completed sampler checkpoint's archive
// redirect is never followed to its download.
func TestSaveLostAnswerThenFailedFailsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		route, key string
		save       func(c *Client) (string, error)
	}{
		{"save_weights", "m1/training/state1", func(c *Client) (string, error) { return c.SaveState(context.Background(), "m1", "state1") }},
		{"save_weights_for_sampler", "m1/sampler/step1", func(c *Client) (string, error) {
			return c.SaveWeightsForSampler(context.Background(), "m1", "step1")
		}},
	} {
		t.Run(tc.route, func(t *testing.T) {
			f := newSkyRL(t)
			f.with(func() {
				f.neverComplete = true
				f.lose[tc.route] = 1
				f.onLost = func(string) { f.failed[tc.key] = "No space left on device" }
			})
			c := skyrlClient(t, f)
			c.RecoveryTimeout = 20 * time.Second
			start := time.Now()
			_, err := tc.save(c)
			if err == nil || !strings.Contains(err.Error(), "Checkpoint creation failed: No space left on device") {
				t.Fatalf("err %v", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("failed after %v, want at once", d)
			}
		})
	}
	// Completed while the first listing missed it: the archive route's 302
	// is not followed.
	f := newSkyRL(t)
	f.with(func() { f.saveDelay = 30 * time.Millisecond; f.lose["save_weights_for_sampler"] = 1 })
	c := skyrlClient(t, f)
	if _, err := c.SaveWeightsForSampler(context.Background(), "m1", "step1"); err != nil {
		t.Fatal(err)
	}
	f.with(func() { f.ckpts["m1/sampler/done"] = true })
	if why := c.checkpointFailed(context.Background(), "sampler", "m1", "done"); why != "" {
		t.Errorf("completed checkpoint: %q", why)
	}
	f.with(func() {
		if f.downloads != 0 {
			t.Errorf("%d downloads of the archive", f.downloads)
		}
	})
}
