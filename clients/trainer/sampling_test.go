package trainer

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
)

// SaveForSampling is the SDK's save_weights_and_get_sampling_client: no
// path, the model's next seq_id and the session's next
// sampling_session_seq_id; the checkpoint's id (SkyRL's ss<N>_seq<M>) is
// noted before the request goes, and the result names the session.
func TestSaveForSamplingIsTheSDKsEphemeralSave(t *testing.T) {
	tk := newTinker(t)
	c := newClient(t, tk, "")
	ctx := context.Background()
	s, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c.ResumeModel("model-0", 4)
	var noted []string
	ss, err := c.SaveForSampling(ctx, s, "model-0", func(id string) error {
		noted = append(noted, id)
		if n := len(bodies(tk, "save_weights_for_sampler")); n != 0 {
			t.Errorf("noted after %d requests", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, bodies(tk, "save_weights_for_sampler")[0].Body,
		`{"model_id": "model-0", "seq_id": 5, "sampling_session_seq_id": 0, "type": "save_weights_for_sampler"}`)
	want := SamplerSession{SessionID: "sampling_e1", CheckpointID: "sampler_weights/ss0_seq5", Path: "tinker://model-0/sampler_weights/ss0_seq5"}
	if ss != want || len(noted) != 1 || noted[0] != want.CheckpointID {
		t.Errorf("got %+v noted %v, want %+v", ss, noted, want)
	}
	// A note that fails stops the save before it is sent, and gives its
	// seq_id back.
	stop := errors.New("ledger full")
	if _, err := c.SaveForSampling(ctx, s, "model-0", func(string) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("%v, want the note's error", err)
	}
	if n := len(bodies(tk, "save_weights_for_sampler")); n != 1 {
		t.Errorf("%d saves sent, want 1", n)
	}
	if last := c.LastSeqID("model-0"); last != 5 {
		t.Errorf("last seq_id %d, want 5", last)
	}
}

// create_sampling_session: exactly one of a base model and a tinker://
// path, the session's next sampling_session_seq_id, an answer at once.
func TestCreateSamplingSession(t *testing.T) {
	tk := newTinker(t)
	tk.Handle("/api/v1/create_sampling_session", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		fake.WriteJSON(w, 200, map[string]any{"type": "create_sampling_session", "sampling_session_id": "sampling_b"})
	})
	c := newClient(t, tk, "")
	ctx := context.Background()
	s, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, err := c.CreateSamplingSession(ctx, s, "", "tinker://m/sampler_weights/a")
	if err != nil || id != "sampling_b" {
		t.Fatalf("%q %v", id, err)
	}
	fake.AssertJSON(t, bodies(tk, "create_sampling_session")[0].Body,
		`{"session_id": "sess-1", "sampling_session_seq_id": 0, "model_path": "tinker://m/sampler_weights/a", "type": "create_sampling_session"}`)
	for _, bad := range [][2]string{{"", ""}, {"base", "tinker://m/a"}, {"", "/tmp/weights"}} {
		if _, err := c.CreateSamplingSession(ctx, s, bad[0], bad[1]); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	if n := len(bodies(tk, "create_sampling_session")); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}
