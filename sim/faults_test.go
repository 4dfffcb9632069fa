package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hindsearch/hindsearch/sim/trainer"
)

// The lost fault lets the server do the work and drops the answer: the
// client sees the connection close, yet the model exists. Routes and
// PerRoute aim it at one path, once.
func TestSimFaultLostDoesTheWorkAndDropsTheAnswer(t *testing.T) {
	ts := trainer.NewServer(getFixture(t).model, testBase, t.TempDir())
	t.Cleanup(ts.Close)
	fy := NewFaulty(ts.Handler(), Faults{Rate: 1, Kinds: []string{"lost"}, Routes: []string{"/api/v1/create_model"}, PerRoute: 1})
	t.Cleanup(fy.Close)
	srv := httptest.NewServer(fy)
	t.Cleanup(srv.Close)
	c := apiClient{T: t, Base: srv.URL}
	session := createSession(c)
	body := map[string]any{"session_id": session, "model_seq_id": 0, "base_model": testBase,
		"lora_config": map[string]any{"rank": 8}, "type": "create_model"}
	raw, _ := json.Marshal(body)
	resp, err := http.Post(srv.URL+"/api/v1/create_model", "application/json", bytes.NewReader(raw))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the lost answer came back: %d", resp.StatusCode)
	}
	_, runs := c.Get("/api/v1/training_runs?limit=10&offset=0")
	if n := len(runs["training_runs"].([]any)); n != 1 {
		t.Fatalf("%d models after the lost create_model, want 1 (the work was done)", n)
	}
	if st, a := c.Post("/api/v1/create_model", body); st != http.StatusOK || a["model_id"] == nil {
		t.Fatalf("the second create_model (past PerRoute): %d %v", st, a)
	}
	if fy.Injected() != 1 {
		t.Fatalf("%d faults injected, want 1", fy.Injected())
	}
	if err := (Faults{Rate: 1, Kinds: []string{"lost"}, PerRoute: -1}).Validate(); err == nil {
		t.Error("a negative PerRoute validated")
	}
}
