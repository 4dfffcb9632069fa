package sim_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/policy/policytest"
	"github.com/hindsearch/hindsearch/clients/policy/sglang"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/sim"
	"github.com/hindsearch/hindsearch/sim/internal/contracttest"
	"github.com/hindsearch/hindsearch/sim/lm"
	simtrainer "github.com/hindsearch/hindsearch/sim/trainer"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// The contract suites of the policy role, run against each client and the
// simulated server it speaks to (docs/conformance.md, "Contract suites").

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
			Policy: client(t, s.URL), Base: contractBase, Prompt: contractPrompt(t), Stops: format.StopStrings,
			Encode: sharedModel(t).Tokenizer().Encode, ChatTemplate: true,
			Adapter: contractAdapter, ErrLoRADisabled: policy.ErrLoRADisabled,
			// Without VLLM_ALLOW_RUNTIME_LORA_UPDATING vLLM mounts no LoRA
			// routes (the simulator always does).
			NoLoRA: func(t *testing.T) policy.Policy {
				off := startPolicy(t, func(h http.Handler) http.Handler {
					return masked(vllm(h), http.StatusNotFound, notMounted, "/v1/load_lora_adapter", "/v1/unload_lora_adapter")
				})
				return client(t, off.URL)
			},
			CompletePath: "/v1/completions",
			Fault:        func(path string, n int, kind string) { s.Fault(t, path, n, kind) },
			Requests:     s.Requests, Retries: 2,
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
			Policy: client(t, s.URL), Base: contractBase, Prompt: contractPrompt(t), Stops: format.StopStrings,
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
				return client(t, off.URL)
			},
			CompletePath: "/generate",
			Fault:        func(path string, n int, kind string) { s.Fault(t, path, n, kind) },
			Requests:     s.Requests, Retries: 2,
		}
	})
}

// The contract servers' helpers (contracttest), under their names here.
type switchServer = contracttest.Switch

const contractBase = contracttest.Base

var (
	sharedModel     = contracttest.SharedModel
	serveSwitch     = contracttest.ServeSwitch
	contractOptions = contracttest.Options
)

// TestPolicyContractTinker runs the policy suite against
// clients/policy/tinker and the simulated trainer's sampling routes
// (SkyRL's asample, create_sampling_session).
func TestPolicyContractTinker(t *testing.T) {
	policytest.Run(t, func(t *testing.T) *policytest.Backend {
		ts := simtrainer.NewServer(sharedModel(t), contractBase, t.TempDir())
		t.Cleanup(ts.Close)
		s := serveSwitch(t, ts.Handler())
		tc, err := trainer.New(contractOptions(s.URL), "")
		if err != nil {
			t.Fatal(err)
		}
		tk := sharedModel(t).Tokenizer()
		c, err := tinker.New(tc, tinker.Options{BaseModel: contractBase, Tokens: tk, EndTokens: []string{"<|im_end|>"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return &policytest.Backend{
			Policy: c, Base: contractBase, Prompt: contractPrompt(t), Stops: format.StopStrings,
			Encode: tk.Encode, ErrNoTokenizer: tinker.ErrNoTokenizer,
			// Weights a Tinker server serves under a name are sampler
			// weights its trainer saved.
			Adapter: func(t *testing.T) string {
				ctx := context.Background()
				sess, err := tc.StartSession(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(sess.Close)
				id, err := tc.CreateModel(ctx, sess, contractBase, 8, 1)
				if err != nil {
					t.Fatal(err)
				}
				path, err := tc.SaveWeightsForSampler(ctx, id, "contract")
				if err != nil {
					t.Fatal(err)
				}
				return path
			},
			UnknownModelRefused: tinker.ErrNotServed,
			// SkyRL checks no sampling range; a prompt token outside the
			// vocabulary fails the future, which is not sent again.
			Refuse:       func(req *policy.CompletionRequest) { req.Prompt = append(slices.Clone(req.Prompt), 1<<30) },
			CompletePath: "/api/v1/asample",
			Fault:        func(path string, n int, kind string) { s.Fault(t, path, n, kind) },
			Requests:     s.Requests, Retries: 2,
		}
	})
}

// A Tinker client asking for protobuf results, as the SDK does, reads
// what a JSON client reads, its logprobs rounded to float32 (SkyRL's
// serialize_result), undefined prompt logprobs included.
func TestTinkerProtobufResults(t *testing.T) {
	ts := simtrainer.NewServer(sharedModel(t), contractBase, t.TempDir())
	ts.Backend = simtrainer.BackendFSDP // prompt logprobs with a leading null
	t.Cleanup(ts.Close)
	s := serveSwitch(t, ts.Handler())
	client := func(pb bool) *tinker.Client {
		tc, err := trainer.New(contractOptions(s.URL), "")
		if err != nil {
			t.Fatal(err)
		}
		c, err := tinker.New(tc, tinker.Options{BaseModel: contractBase, Tokens: sharedModel(t).Tokenizer(), EndTokens: []string{"<|im_end|>"}, Protobuf: pb})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	ctx := context.Background()
	tc, _ := trainer.New(contractOptions(s.URL), "")
	sess, err := tc.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.Close)
	mid, err := tc.CreateModel(ctx, sess, contractBase, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := tc.SaveForSampling(ctx, sess, mid, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, pb := client(false), client(true)
	js.Serve("m", ss.SessionID)
	pb.Serve("m", ss.SessionID)
	seed := int64(3)
	req := policy.CompletionRequest{Model: "m", Prompt: contractPrompt(t), MaxTokens: 300, Sampling: policy.Neutral(), Seed: &seed, Stop: format.StopStrings}
	a, err := js.Complete(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pb.Complete(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.TokenIDs, b.TokenIDs) || a.Text != b.Text || a.FinishReason != b.FinishReason || a.StopReason != b.StopReason {
		t.Fatalf("json %+v\nprotobuf %+v", a, b)
	}
	for i := range a.Logprobs {
		if float64(float32(a.Logprobs[i])) != b.Logprobs[i] {
			t.Fatalf("logprob %d: json %v protobuf %v, want the float32 of the first", i, a.Logprobs[i], b.Logprobs[i])
		}
	}
	sa, err := js.Score(ctx, "m", req.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := pb.Score(ctx, "m", req.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range sa {
		if float64(float32(sa[i])) != sb[i] {
			t.Fatalf("score %d: json %v protobuf %v", i, sa[i], sb[i])
		}
	}
}
