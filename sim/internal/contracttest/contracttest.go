// Package contracttest serves the simulated servers to the role contract
// suites (clients/policy/policytest, clients/trainer/trainertest) run by
// sim's and sim/trainer's external tests: one shared simulated model, and
// each server on 127.0.0.1 behind a fault switch that arms the simulator's
// own fault injection.
package contracttest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/sim"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// Base is the base model the contract servers serve.
const Base = "Qwen/Qwen2.5-3B-Instruct"

var (
	modelOnce sync.Once
	model     *lm.Model
	modelErr  error
)

// SharedModel is the simulated policy model every contract server serves,
// built once per test binary (the tokenizer is large).
func SharedModel(t *testing.T) *lm.Model {
	t.Helper()
	modelOnce.Do(func() {
		tk, err := lm.NewTokenizer()
		if err != nil {
			modelErr = err
			return
		}
		model = lm.NewModel(tk, 1e-6)
	})
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return model
}

// Switch serves a simulated server on 127.0.0.1: it counts the requests
// of each path, then hands them to the server's handler, or to a
// sim.Faulty around it while a fault is armed.
type Switch struct {
	// URL is the server's base URL.
	URL  string
	base http.Handler
	mu   sync.Mutex
	cur  http.Handler
	n    map[string]int
}

// ServeHTTP counts the request and passes it on.
func (s *Switch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.n[r.URL.Path]++
	h := s.cur
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

// Fault arms the simulator's own fault injection: the next n requests to
// path fail with kind, the others pass.
func (s *Switch) Fault(t *testing.T, path string, n int, kind string) {
	f := sim.NewFaulty(s.base, sim.Faults{Rate: 1, Kinds: []string{kind}, Routes: []string{path}, PerRoute: n})
	t.Cleanup(f.Close)
	s.mu.Lock()
	s.cur = f
	s.mu.Unlock()
}

// Requests counts the requests to path so far.
func (s *Switch) Requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[path]
}

// ServeSwitch serves h on 127.0.0.1 behind a fault switch until the test
// ends.
func ServeSwitch(t *testing.T, h http.Handler) *Switch {
	s := &Switch{base: h, cur: h, n: map[string]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Options are the transport options of a contract client of url: quick
// retries, a 20 s deadline.
func Options(url string) transport.Options {
	return transport.Options{BaseURL: url, Timeout: 20 * time.Second, Retries: 2,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond}
}

// SavePending is a trainertest Backend's SavePending for the Tinker API
// server at url: SkyRL's archive route answers 425 while a checkpoint is
// still being saved. Its probe client is closed when the test ends.
func SavePending(t *testing.T, url string) func(id, name string) bool {
	probe := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	t.Cleanup(probe.CloseIdleConnections)
	return func(id, name string) bool {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet,
			url+"/api/v1/training_runs/"+id+"/checkpoints/"+name+"/archive", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := probe.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusTooEarly
	}
}
