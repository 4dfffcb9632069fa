package sim

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
)

// TestStartClose starts every role, checks each answers with the
// simulator's labels, closes them and checks they stop answering and leave
// no goroutines behind.
func TestStartClose(t *testing.T) {
	f := getFixture(t)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	before := runtime.NumGoroutine()
	s, err := Start(Config{BaseModel: testBase, JudgeModel: "judge", JudgeAPIKey: "k", CheckpointsDir: t.TempDir(),
		Corpus: f.corpus[:100], PolicyReplicas: 2, Judge: true, Trainer: true})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	if len(s.PolicyURLs) != 2 || len(s.Policies) != 2 || s.JudgeURL == "" || s.TrainerURL == "" || s.Model == nil || s.Trainer == nil || s.JudgeSrv == nil {
		t.Fatalf("servers %+v", s)
	}
	if s.Model.Epsilon() != 1e-6 {
		t.Errorf("default epsilon %v, want 1e-6", s.Model.Epsilon())
	}
	urls := []string{s.PolicyURLs[0] + "/health", s.PolicyURLs[1] + "/v1/models", s.JudgeURL + "/health", s.TrainerURL + "/api/v1/healthz"}
	for _, u := range urls {
		if !strings.HasPrefix(u, "http://127.0.0.1:") {
			t.Errorf("%s is not on loopback", u)
		}
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(httpx.SimulatorHeader) != "true" {
			t.Errorf("%s: %d %s", u, resp.StatusCode, b)
		}
	}
	// The judge requires its key.
	resp, err := client.Post(s.JudgeURL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"judge","messages":[{"role":"user","content":"Question: x?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("judge without key: %d", resp.StatusCode)
	}
	s.Close()
	closed = true
	for _, u := range urls {
		if resp, err := client.Get(u); err == nil {
			resp.Body.Close()
			t.Errorf("%s still answers after Close", u)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before Start:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	// Close twice is harmless.
	s.Close()
}

// TestStartPolicyOnly starts one role alone.
func TestStartPolicyOnly(t *testing.T) {
	s, err := Start(Config{BaseModel: testBase, PolicyReplicas: 1, Epsilon: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if len(s.PolicyURLs) != 1 || s.JudgeURL != "" || s.TrainerURL != "" || s.Model.Epsilon() != 0.01 {
		t.Errorf("servers %+v", s)
	}
}
