package trainer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Heartbeats that fail for a while are not fatal and resume when the
// server answers again.
func TestHeartbeatsLostAndResumed(t *testing.T) {
	var beats, failed atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/create_session":
			_ = json.NewEncoder(w).Encode(map[string]string{"session_id": "s1"})
		case "/api/v1/session_heartbeat":
			if beats.Add(1) <= 3 {
				failed.Add(1)
				http.Error(w, "down", http.StatusBadGateway)
				return
			}
			_, _ = w.Write([]byte(`{"type":"session_heartbeat"}`))
		}
	}))
	defer srv.Close()
	o := transport.DefaultOptions("trainer", srv.URL)
	o.Retries = 0
	c, err := New(o, "")
	if err != nil {
		t.Fatal(err)
	}
	c.HeartbeatInterval = 10 * time.Millisecond
	s, err := c.StartSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for beats.Load() < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s.Close()
	if failed.Load() != 3 || beats.Load() < 6 {
		t.Fatalf("%d heartbeats, %d failed: want them to go on after the failures", beats.Load(), failed.Load())
	}
}

// A 409 (the seq_id already used with another body) is reported clearly,
// not retried into a loop.
func TestSeqIDConflictIsReported(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"detail":"Training request sequence number was reused"}`))
	}))
	defer srv.Close()
	o := transport.DefaultOptions("trainer", srv.URL)
	c, err := New(o, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.OptimStep(context.Background(), "m1", AdamParams{LearningRate: 1e-6, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "seq_id 1") {
		t.Fatalf("err %v", err)
	}
	if posts.Load() != 1 {
		t.Fatalf("%d posts: a 409 must not be retried", posts.Load())
	}
}
