package orchestrator

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hindsearch/hindsearch/orchestrator/metrics"
)

// fakeMLflow is an MLflow tracking server's REST routes in memory: it
// records what it is sent and fails the first failN log-batch calls (or
// every call with down) with a 503.
type fakeMLflow struct {
	mu        sync.Mutex
	failN     int
	down      bool
	auth      []string
	steps     map[int]int // reward_mean points per step
	params    int
	artifacts []string
	status    string
	calls     int
}

func (f *fakeMLflow) start(t *testing.T) string {
	t.Helper()
	f.steps = map[int]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls++
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		body, _ := io.ReadAll(r.Body)
		if f.down {
			http.Error(w, `{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "down"}`, http.StatusServiceUnavailable)
			return
		}
		switch {
		case strings.HasSuffix(r.URL.Path, "/experiments/get-by-name"):
			http.Error(w, `{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such experiment"}`, http.StatusNotFound)
		case strings.HasSuffix(r.URL.Path, "/experiments/create"):
			_, _ = w.Write([]byte(`{"experiment_id": "7"}`))
		case strings.HasSuffix(r.URL.Path, "/runs/create"):
			_, _ = w.Write([]byte(`{"run": {"info": {"run_id": "r1", "experiment_id": "7"}}}`))
		case strings.HasSuffix(r.URL.Path, "/runs/log-batch"):
			var b struct {
				Metrics []struct {
					Key  string `json:"key"`
					Step int    `json:"step"`
				} `json:"metrics"`
				Params []json.RawMessage `json:"params"`
			}
			if err := json.Unmarshal(body, &b); err != nil {
				http.Error(w, `{"error_code": "BAD_REQUEST"}`, 400)
				return
			}
			if len(b.Metrics) > 0 && f.failN > 0 {
				f.failN--
				http.Error(w, `{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "busy"}`, http.StatusServiceUnavailable)
				return
			}
			for _, m := range b.Metrics {
				if m.Key == "reward_mean" {
					f.steps[m.Step]++
				}
			}
			f.params += len(b.Params)
			_, _ = w.Write([]byte(`{}`))
		case strings.HasSuffix(r.URL.Path, "/runs/update"):
			var b struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal(body, &b)
			f.status = b.Status
			_, _ = w.Write([]byte(`{}`))
		case strings.Contains(r.URL.Path, "/mlflow-artifacts/artifacts/7/r1/artifacts/") && r.Method == http.MethodPut:
			f.artifacts = append(f.artifacts, r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:])
		default:
			http.Error(w, `{"error_code": "ENDPOINT_NOT_FOUND"}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runTracked runs the test recipe with sets and environ (where the
// trackers' secrets are) and fresh metrics, returning the run's output,
// the metrics and the run directory.
func runTracked(t *testing.T, sets []string, environ []string) (string, *metrics.Metrics, string) {
	t.Helper()
	r := testRecipe(t, "", append([]string{"eval.datasets.nq=", "hindsight.enabled=false"}, sets...)...)
	m := metrics.New()
	out := runMetered(t, r, environ, m)
	return out, m, r.Output.Dir
}

// Trackers are off by default: no files, no ids in state.json, no lines.
func TestTrackersOffByDefault(t *testing.T) {
	out, _, dir := runTracked(t, nil, nil)
	for _, p := range []string{"tensorboard", "wandb"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s written without tracking.*", p)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "state.json"))
	if strings.Contains(string(b), `"tracking"`) || strings.Contains(out, "tracking:") {
		t.Errorf("tracking in state.json or output:\n%s\n%s", b, out)
	}
}

// An MLflow server that fails the first log-batch calls never stops or
// fails training: the run finishes, one warning is printed, the failures
// are counted, and every step reaches the server once; the token from the
// environment is sent as a bearer token and written nowhere.
func TestMLflowFailuresNeverStopTraining(t *testing.T) {
	f := &fakeMLflow{failN: 2}
	url := f.start(t)
	const token = "s3cret-token-4711"
	out, m, dir := runTracked(t, []string{"tracking.mlflow.tracking_uri=" + url, "http.retries=0"}, []string{"MLFLOW_TRACKING_TOKEN=" + token})
	if n := strings.Count(out, "warning: tracking: mlflow"); n != 1 {
		t.Errorf("%d tracker warnings, want 1:\n%s", n, out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := 1; s <= 2; s++ {
		if f.steps[s] != 1 {
			t.Errorf("step %d sent %d times, want once: %v", s, f.steps[s], f.steps)
		}
	}
	if f.status != "FINISHED" || f.params == 0 || len(f.artifacts) == 0 {
		t.Errorf("status %q, %d params, artifacts %v", f.status, f.params, f.artifacts)
	}
	for _, a := range f.auth {
		if a != "Bearer "+token {
			t.Fatalf("Authorization %q", a)
		}
	}
	if got := sum(scrape(t, m), "hindsearch_tracker_failures_total"); got != 2 {
		t.Errorf("tracker failures counted %v, want 2", got)
	}
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(token)) {
				t.Errorf("%s holds the token", p)
			}
		}
		return nil
	})
	if strings.Contains(out, token) {
		t.Error("the output holds the token")
	}
}

// A tracker that never answers does not hold the run: it finishes, and
// the end says what the tracker did not take and how to send it later.
func TestMLflowDownTheWholeRun(t *testing.T) {
	f := &fakeMLflow{down: true}
	url := f.start(t)
	out, _, _ := runTracked(t, []string{"tracking.mlflow.tracking_uri=" + url, "http.retries=0", "tracking.flush_seconds=0.5"}, nil)
	if !strings.Contains(out, "steps taken, 3 not") || !strings.Contains(out, "orchestrate track") {
		t.Errorf("the end does not say what was not sent:\n%s", out)
	}
}
