package sim_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/policy/policytest"
	"github.com/hindsearch/hindsearch/clients/policy/sglang"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/sim"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// The contract suites of the policy role, run against each client and the
// simulated server it speaks to (docs/conformance.md, "Contract suites").

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

// switchServer serves a simulated policy on 127.0.0.1: it counts the
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

func (s *switchServer) requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[path]
}

// masked answers the given paths with status and body, as a server
// started without those routes (or features) does; other paths go to h.
func masked(h http.Handler, status int, body string, paths ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range paths {
			if r.URL.Path == p {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = w.Write([]byte(body))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// startPolicy starts a fresh simulated policy serving contractBase, its
// handler passed through wrap (nil: as is); everything stops with the test.
func startPolicy(t *testing.T, wrap func(http.Handler) http.Handler) *switchServer {
	t.Helper()
	ps := sim.NewPolicyServer(sharedModel(t), contractBase)
	h := ps.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	t.Cleanup(ps.Close)
	return serveSwitch(t, h)
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

// contractPrompt is a Search-R1 rollout prompt in Qwen2.5's chat template:
// the simulated model answers it with a search or an answer turn.
func contractPrompt(t *testing.T) []int {
	text := "<|im_start|>system\n" + lm.SystemPrompt + "<|im_end|>\n<|im_start|>user\n" +
		format.UserPrompt("Who wrote the novel The Old Man and the Sea?", "") + "<|im_end|>\n<|im_start|>assistant\n"
	return sharedModel(t).Tokenizer().Encode(text)
}

// writeParams writes params as the simulator's safetensors under file in
// a new directory, with extra files, and returns the directory.
func writeParams(t *testing.T, file string, extra map[string]string) string {
	t.Helper()
	p := lm.InitialParams()
	for i := range p {
		p[i] += 0.2 * float64(i%5-2)
	}
	st, err := weights.EncodeSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, file), st, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, body := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func contractAdapter(t *testing.T) string {
	return writeParams(t, "adapter_model.safetensors", map[string]string{"adapter_config.json": `{"peft_type": "LORA", "r": 8}`})
}

func contractWeights(t *testing.T) string {
	return writeParams(t, "model.safetensors", map[string]string{"config.json": `{"model_type": "qwen2"}`})
}

// FastAPI's answer to a route that is not mounted.
const notMounted = `{"detail":"Not Found"}`

// TestPolicyContractVLLM runs the policy suite against clients/policy and
// the simulated vLLM (/v1/completions).
func TestPolicyContractVLLM(t *testing.T) {
	// Stock vLLM has no /update_weights_from_disk; the simulator serves
	// SGLang's route on the same handler, so it is hidden here.
	vllm := func(h http.Handler) http.Handler {
		return masked(h, http.StatusNotFound, notMounted, "/update_weights_from_disk")
	}
	client := func(t *testing.T, url string) policy.Policy {
		c, err := policy.New(contractOptions(url))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	policytest.Run(t, func(t *testing.T) *policytest.Backend {
		s := startPolicy(t, vllm)
		return &policytest.Backend{
			Policy: client(t, s.url), Base: contractBase, Prompt: contractPrompt(t), Stops: format.StopStrings,
			Encode: sharedModel(t).Tokenizer().Encode, ChatTemplate: true,
			Adapter: contractAdapter, ErrLoRADisabled: policy.ErrLoRADisabled,
			// Without VLLM_ALLOW_RUNTIME_LORA_UPDATING vLLM mounts no LoRA
			// routes (the simulator always does).
			NoLoRA: func(t *testing.T) policy.Policy {
				off := startPolicy(t, func(h http.Handler) http.Handler {
					return masked(vllm(h), http.StatusNotFound, notMounted, "/v1/load_lora_adapter", "/v1/unload_lora_adapter")
				})
				return client(t, off.url)
			},
			CompletePath: "/v1/completions",
			Fault:        func(path string, n int, kind string) { s.fault(t, path, n, kind) },
			Requests:     s.requests, Retries: 2,
		}
	})
}

// TestPolicyContractSGLang runs the policy suite against
// clients/policy/sglang and the simulated SGLang (/generate).
func TestPolicyContractSGLang(t *testing.T) {
	client := func(t *testing.T, url string) policy.Policy {
		c, err := sglang.New(contractOptions(url), contractBase)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	policytest.Run(t, func(t *testing.T) *policytest.Backend {
		s := startPolicy(t, nil)
		return &policytest.Backend{
			Policy: client(t, s.url), Base: contractBase, Prompt: contractPrompt(t), Stops: format.StopStrings,
			Encode: sharedModel(t).Tokenizer().Encode, ChatTemplate: false, ErrNoChatTemplate: sglang.ErrNoChatTemplate,
			Adapter: contractAdapter, Weights: contractWeights, ErrLoRADisabled: sglang.ErrLoRADisabled,
			// SGLang started without --enable-lora refuses the LoRA routes
			// with a 400 naming the flag (the text of clients/policy/sglang's
			// TestLoRARoutes; the simulator does not simulate LoRA off).
			NoLoRA: func(t *testing.T) policy.Policy {
				off := startPolicy(t, func(h http.Handler) http.Handler {
					return masked(h, http.StatusBadRequest, `{"success": false, "error_message": "LoRA is not enabled. Please set --enable-lora."}`,
						"/load_lora_adapter", "/unload_lora_adapter")
				})
				return client(t, off.url)
			},
			CompletePath: "/generate",
			Fault:        func(path string, n int, kind string) { s.fault(t, path, n, kind) },
			Requests:     s.requests, Retries: 2,
		}
	})
}
