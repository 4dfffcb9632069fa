package policy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
)

func TestUpdateWeightsFromDisk(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/update_weights_from_disk", http.StatusOK,
		map[string]any{"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": 0})
	if err := c.UpdateWeightsFromDisk(context.Background(), "/runs/a/adapters/run-step0003"); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests("/update_weights_from_disk")
	if len(reqs) != 1 || reqs[0].Method != http.MethodPost {
		t.Fatalf("requests %+v", reqs)
	}
	fake.AssertJSON(t, reqs[0].Body, `{"model_path":"/runs/a/adapters/run-step0003","load_format":"auto","abort_all_requests":false}`)
}

func TestUpdateWeightsFromDiskRefused(t *testing.T) {
	const msg = "Failed to get weights iterator: /w/missing (no such file or directory)."
	cases := []struct {
		name   string
		status int
		answer map[string]any
		want   []string
	}{
		{"400", http.StatusBadRequest, map[string]any{"success": false, "message": msg, "num_paused_requests": 0},
			[]string{msg, "status 400", "/w/missing"}},
		{"200 success false", http.StatusOK, map[string]any{"success": false, "message": msg, "num_paused_requests": 2},
			[]string{"refused: " + msg, "/w/missing"}},
		{"no success field", http.StatusOK, map[string]any{"message": "ok"}, []string{"no success field"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newTest(t)
			s.HandleJSON("/update_weights_from_disk", tc.status, tc.answer)
			err := c.UpdateWeightsFromDisk(context.Background(), "/w/missing")
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range append(tc.want, s.URL) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			// A refusal is an answer: not retried, not a dead replica.
			if n := len(s.Requests("/update_weights_from_disk")); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			if ReplicaDown(err) {
				t.Errorf("a refusal counts as a dead replica: %v", err)
			}
		})
	}
}

func TestUpdateWeightsFromDiskTransportErrors(t *testing.T) {
	// A server without the route (stock vLLM): the error says what to use.
	s, c := newTest(t)
	s.HandleJSON("/update_weights_from_disk", http.StatusNotFound, map[string]any{"detail": "Not Found"})
	err := c.UpdateWeightsFromDisk(context.Background(), "/w/x")
	if !errors.Is(err, ErrWeightsFromDiskUnsupported) || !strings.Contains(err.Error(), s.URL) {
		t.Errorf("missing route: %v", err)
	}
	// A dead engine (503 on every attempt) is a replica that is down.
	s, c = newTest(t)
	s.FailNext("/update_weights_from_disk", 10, http.StatusServiceUnavailable, nil, "engine dead")
	err = c.UpdateWeightsFromDisk(context.Background(), "/w/x")
	if err == nil || !ReplicaDown(err) || !strings.Contains(err.Error(), "/w/x") {
		t.Errorf("503: %v", err)
	}
	// A 400 whose body is not SGLang's answer is shown as is.
	s, c = newTest(t)
	s.FailNext("/update_weights_from_disk", 1, http.StatusBadRequest, nil, "model_path missing")
	err = c.UpdateWeightsFromDisk(context.Background(), "/w/x")
	if err == nil || !strings.Contains(err.Error(), "model_path missing") {
		t.Errorf("plain 400: %v", err)
	}
}
