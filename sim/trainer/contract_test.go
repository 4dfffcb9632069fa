package trainer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/trainer/trainertest"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/sim"
	"github.com/hindsearch/hindsearch/sim/lm"
	simtrainer "github.com/hindsearch/hindsearch/sim/trainer"
)

// The trainer role's contract suite run against clients/trainer and the
// simulated Tinker API server: SkyRL's JAX backend (a LoRA of rank 8, the
// default), its FSDP backend (full weights, one model at a time) and the
// hosted service's try_again polling (docs/conformance.md, "Contract
// suites").
func TestTrainerContract(t *testing.T) {
	for _, tc := range []struct {
		name     string
		backend  simtrainer.TrainerBackend
		rank     int
		tryAgain bool
	}{
		{"jax", simtrainer.BackendJAX, 8, false},
		{"fsdp", simtrainer.BackendFSDP, 0, false},
		{"hosted-try-again", simtrainer.BackendJAX, 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trainertest.Run(t, func(t *testing.T) *trainertest.Backend {
				ts := simtrainer.NewTrainerServer(sharedModel(t), contractBase, t.TempDir())
				ts.Backend, ts.TryAgain = tc.backend, tc.tryAgain
				ts.PollWait = 20 * time.Millisecond
				// Saves take long enough for a delete to meet one running
				// (SkyRL's 425), and futures stay pending for a few polls.
				ts.StepDelay = 150 * time.Millisecond
				t.Cleanup(ts.Close)
				s := serveSwitch(t, ts.Handler())
				c, err := trainer.New(contractOptions(s.url), "")
				if err != nil {
					t.Fatal(err)
				}
				c.PollWaitMin, c.PollWaitMax = 2*time.Millisecond, 20*time.Millisecond
				c.ListWaitMax, c.DeleteTries = 20*time.Millisecond, 50
				c.RecoveryTimeout = 20 * time.Second
				t.Cleanup(c.Close)
				probe := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
				t.Cleanup(probe.CloseIdleConnections)
				return &trainertest.Backend{
					Trainer: c, Checkpoints: c.Checkpoints, BaseModel: contractBase, Rank: tc.rank,
					Tokens: sharedModel(t).Tokenizer().Encode("Question: who wrote The Old Man and the Sea? Answer: <answer> Ernest Hemingway </answer>"),
					Lose:   func(route string, n int) { s.fault(t, route, n, "lost") },
					SavePending: func(id, name string) bool {
						// SkyRL's archive route: 425 while the save runs.
						req, err := http.NewRequestWithContext(context.Background(), http.MethodGet,
							s.url+"/api/v1/training_runs/"+id+"/checkpoints/"+name+"/archive", nil)
						if err != nil {
							t.Fatal(err)
						}
						resp, err := probe.Do(req)
						if err != nil {
							return false
						}
						resp.Body.Close()
						return resp.StatusCode == http.StatusTooEarly
					},
				}
			})
		})
	}
}

// The contract servers' helpers: a copy of sim's (sim/policy_contract_test.go,
// package sim_test), keep them alike. The fault switch uses the simulator's
// own fault injection (sim.NewFaulty), which this external test package
// may import.

const contractBase = "Qwen/Qwen2.5-3B-Instruct"

var (
	contractOnce  sync.Once
	contractModel *lm.Model
	contractErr   error
)

// sharedModel is the simulated policy model every contract server serves
// (built once per test binary: the tokenizer is large).
func sharedModel(t *testing.T) *lm.Model {
	t.Helper()
	contractOnce.Do(func() {
		tk, err := lm.NewTokenizer()
		if err != nil {
			contractErr = err
			return
		}
		contractModel = lm.NewModel(tk, 1e-6)
	})
	if contractErr != nil {
		t.Fatal(contractErr)
	}
	return contractModel
}

// switchServer serves a simulated server on 127.0.0.1: it counts the
// requests of each path, then hands them to the server's handler, or to a
// sim.Faulty around it while a fault is armed.
type switchServer struct {
	url  string
	base http.Handler
	mu   sync.Mutex
	cur  http.Handler
	n    map[string]int
}

func (s *switchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.n[r.URL.Path]++
	h := s.cur
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

// fault arms the simulator's own fault injection: the next n requests to
// path fail with kind, the others pass.
func (s *switchServer) fault(t *testing.T, path string, n int, kind string) {
	f := sim.NewFaulty(s.base, sim.Faults{Rate: 1, Kinds: []string{kind}, Routes: []string{path}, PerRoute: n})
	t.Cleanup(f.Close)
	s.mu.Lock()
	s.cur = f
	s.mu.Unlock()
}

// serveSwitch serves h on 127.0.0.1 behind a fault switch until the test
// ends.
func serveSwitch(t *testing.T, h http.Handler) *switchServer {
	s := &switchServer{base: h, cur: h, n: map[string]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func contractOptions(url string) transport.Options {
	return transport.Options{BaseURL: url, Timeout: 20 * time.Second, Retries: 2,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond}
}
