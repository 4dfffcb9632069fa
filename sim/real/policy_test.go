package real_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/policy/policytest"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/clients/policy/tokenizer"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/fleet"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/sim/internal/contracttest"
)

// qwen3 is the built-in Qwen3 tokenizer: the tiny model's tokenizer.json.
func qwen3(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tk, err := tokenizer.Qwen3()
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// searchPrompt is a Search-R1 rollout prompt in Qwen3's chat template, as
// the program builds it: the taught model answers it with a turn that
// ends at </search> or </answer> for most seeds.
func searchPrompt(t *testing.T) []int {
	text := roles.Qwen3Chat([]policy.Message{{Role: "user", Content: format.UserPrompt("Who wrote the novel The Old Man and the Sea?", "")}}, true)
	return qwen3(t).Encode(text)
}

// options are a contract client's transport options: the suite's quick
// retries, a deadline for a CPU server.
func options(url string) transport.Options {
	o := contracttest.Options(url)
	o.Timeout = 120 * time.Second
	return o
}

// skyrlAdapter is sampler weights SkyRL saved for a LoRA of the tiny
// model: the tinker:// path, and the archive on disk. Made once per test
// binary (a JAX save compiles).
type skyrlAdapter struct {
	once    sync.Once
	path    string
	archive string
	err     error
}

var adapter skyrlAdapter

func (a *skyrlAdapter) get(t *testing.T, st *stack) (tinkerPath, archive string) {
	t.Helper()
	a.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		tc, err := trainer.New(options(st.SkyRL), "")
		if err != nil {
			a.err = err
			return
		}
		defer tc.Close()
		s, err := tc.StartSession(ctx)
		if err != nil {
			a.err = err
			return
		}
		defer s.Close()
		id, err := tc.CreateModel(ctx, s, st.Name, 8, 1)
		if err != nil {
			a.err = err
			return
		}
		// One step, so the adapter is not the zero update.
		tk, _ := tokenizer.Qwen3()
		toks := tk.Encode("Question: who wrote The Old Man and the Sea? <answer> Ernest Hemingway </answer>")
		if _, err = tc.ForwardBackward(ctx, id, []trainer.Datum{contracttest.ImportanceDatum(toks)}, "importance_sampling", nil); err == nil {
			_, err = tc.OptimStep(ctx, id, trainer.AdamParams{LearningRate: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
		}
		if err != nil {
			a.err = err
			return
		}
		if a.path, a.err = tc.SaveWeightsForSampler(ctx, id, "contract-adapter"); a.err != nil {
			return
		}
		a.archive, a.err = fleet.ArchivePath(st.Checkpoints, a.path)
	})
	if a.err != nil {
		t.Fatalf("sampler weights from SkyRL: %v", a.err)
	}
	return a.path, a.archive
}

// TestPolicyContractVLLM runs the policy role's contract suite, unchanged,
// against the real vLLM for the CPU behind the fault switch: the adapters
// it loads are SkyRL's sampler archives unpacked as the LoRA sync unpacks
// them, and the server with LoRA off is the judge's vLLM (started without
// VLLM_ALLOW_RUNTIME_LORA_UPDATING).
func TestPolicyContractVLLM(t *testing.T) {
	st := realStack(t)
	tk := qwen3(t)
	client := func(t *testing.T, url string) policy.Policy {
		c, err := policy.New(options(url))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	policytest.Run(t, func(t *testing.T) *policytest.Backend {
		s := proxied(t, st.VLLM)
		p := client(t, s.URL)
		// The suite expects a fresh server: one shared vLLM forgets what
		// an earlier subtest loaded.
		for _, name := range []string{"contract-a"} {
			_ = p.UnloadLoRA(context.Background(), name)
		}
		return &policytest.Backend{
			Policy: p, Base: st.Name, Prompt: searchPrompt(t), Stops: format.StopStrings,
			Encode: tk.Encode, ChatTemplate: true,
			Adapter: func(t *testing.T) string {
				_, archive := adapter.get(t, st)
				dir, err := fleet.UnpackAdapter(archive, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				return dir
			},
			ErrLoRADisabled: policy.ErrLoRADisabled,
			NoLoRA:          func(t *testing.T) policy.Policy { return client(t, proxied(t, st.Judge).URL) },
			CompletePath:    "/v1/completions",
			Fault:           func(path string, n int, kind string) { s.Fault(t, path, n, kind) },
			Requests:        s.Requests, Retries: 2,
		}
	})
}

// TestPolicyContractSkyRLSampling runs the policy suite against the real
// SkyRL's Tinker sampling routes (policy.server tinker): sampling sessions
// and asample futures on the JAX backend, adapters being sampler weights
// its trainer saved.
func TestPolicyContractSkyRLSampling(t *testing.T) {
	st := realStack(t)
	tk := qwen3(t)
	policytest.Run(t, func(t *testing.T) *policytest.Backend {
		s := proxied(t, st.SkyRL)
		tc, err := trainer.New(options(s.URL), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tc.Close)
		c, err := tinker.New(tc, tinker.Options{BaseModel: st.Name, Tokens: tk, EndTokens: roles.QwenEndTokens[:1]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return &policytest.Backend{
			Policy: c, Base: st.Name, Prompt: searchPrompt(t), Stops: format.StopStrings,
			Encode: tk.Encode, ErrNoTokenizer: tinker.ErrNoTokenizer,
			Adapter: func(t *testing.T) string {
				path, _ := adapter.get(t, st)
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
