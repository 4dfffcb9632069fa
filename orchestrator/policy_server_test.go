package orchestrator

import (
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/sglang"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// The same recipe sends the same batches and gets the same evaluations
// whether the policy replicas are driven through vLLM's /v1/completions
// (with /tokenize round trips) or SGLang's native /generate (prompts and
// environment text tokenized locally), for both sync kinds the simulator
// serves: LoRA adapters (lora_path) and full weights (update_weights_from_disk).
func TestSGLangServerGivesTheSameBatchesAsVLLM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four short trainings")
	}
	for _, sync := range [][]string{{"sync.kind=lora"}, {"sync.kind=sglang_disk", "trainer.lora_rank=0", "sim.trainer.backend=fsdp"}} {
		t.Run(sync[0], func(t *testing.T) {
			run := func(server ...string) *Summary {
				t.Helper()
				r := testRecipe(t, "", append(append([]string{"policy.urls=embedded,embedded"}, sync...), server...)...)
				deps, emb, err := setup.Connect(t.Context(), r, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer emb.Close()
				if r.Policy.Server == recipes.ServerSGLang {
					for i, p := range deps.Policies {
						if _, ok := p.(*sglang.Client); !ok {
							t.Fatalf("replica %d: %T, want the SGLang client", i, p)
						}
					}
				}
				sum, err := (&Runner{Recipe: r, Deps: deps}).Run(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range emb.Sim().Policies {
					if p.Stats().Requests == 0 {
						t.Errorf("replica %d served no request", i)
					}
					if got := p.IgnoredFields(); len(got) != 0 {
						t.Errorf("replica %d ignored request fields: %v", i, got)
					}
				}
				return sum
			}
			vllm := run("policy.server=vllm", "policy.tokenize=server")
			sg := run("policy.server=sglang", "policy.tokenize=local")
			if a, b := stepDigests(vllm), stepDigests(sg); !slices.Equal(a, b) {
				t.Errorf("step digests: vllm %v\nsglang %v", a, b)
			}
			if a, b := evalsText(vllm.Evals), evalsText(sg.Evals); a != b {
				t.Errorf("evaluations: vllm %s\nsglang %s", a, b)
			}
		})
	}
}

// policy.server tinker samples through the embedded trainer's Tinker
// routes (asample on sampling sessions of ephemeral saves) the same model
// with the same sampler as the simulated vLLM: the same settings give
// the same batches and evaluations, LoRA or full weights, and with the
// initial policy as the teacher on JAX. The simulated JAX backend loads a
// sampled checkpoint into the slot it trains, as SkyRL's does (B1): before
// the run served the initial weights from base-model sessions there, the
// teacher's scoring of the initial save rolled the training back from
// step 2 on and the batches parted from vLLM's.
func TestTinkerServerGivesTheSameBatchesAsVLLM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six short trainings")
	}
	for _, tc := range []struct {
		name string
		sets []string
	}{
		{"lora", []string{"sim.trainer.backend=jax"}},
		{"full-fsdp", []string{"trainer.lora_rank=0", "sim.trainer.backend=fsdp"}},
		{"lora-teacher-initial", []string{"sim.trainer.backend=jax", "hindsight.teacher=initial", "train.steps=4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(sets ...string) *Summary {
				t.Helper()
				r := testRecipe(t, "", append(append([]string{}, tc.sets...), sets...)...)
				deps, emb, err := setup.Connect(t.Context(), r, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer emb.Close()
				if r.Policy.Server == recipes.ServerTinker {
					if _, ok := deps.Policies[0].(*tinker.Client); !ok || len(emb.Sim().Policies) != 0 {
						t.Fatalf("policy %T with %d simulated policy servers, want the Tinker client alone", deps.Policies[0], len(emb.Sim().Policies))
					}
				}
				sum, err := (&Runner{Recipe: r, Deps: deps}).Run(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				return sum
			}
			sync := "sync.kind=lora"
			if slices.Contains(tc.sets, "trainer.lora_rank=0") {
				sync = "sync.kind=sglang_disk"
			}
			ref := []string{sync, "policy.tokenize=local"}
			if sync == "sync.kind=sglang_disk" {
				ref = append(ref, "policy.server=sglang")
			}
			want := run(ref...)
			got := run("policy.server=tinker", "sync.kind=tinker", "policy.tokenize=local")
			if a, b := stepDigests(want), stepDigests(got); !slices.Equal(a, b) {
				t.Errorf("step digests: %s %v\ntinker %v", ref, a, b)
			}
			if a, b := evalsText(want.Evals), evalsText(got.Evals); a != b {
				t.Errorf("evaluations: %s %s\ntinker %s", ref, a, b)
			}
		})
	}
}

// Off the policy, sync.kind tinker on SkyRL's JAX backend would sample
// checkpoints older than the weights being trained, which that backend
// loads into the training slot (B1): the run refuses before step 1,
// naming the key and the fix, instead of training from rolled-back weights.
func TestTinkerOffPolicyOnJAXIsRefused(t *testing.T) {
	r := testRecipe(t, "", "sim.trainer.backend=jax", "train.max_off_policy_steps=1", "policy.server=tinker", "sync.kind=tinker", "policy.tokenize=local")
	deps, emb, err := setup.Connect(t.Context(), r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	_, err = (&Runner{Recipe: r, Deps: deps}).Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "train.max_off_policy_steps") || !strings.Contains(err.Error(), "rolling the training back") {
		t.Fatalf("run: %v, want the preflight's refusal", err)
	}
	if n := emb.Sim().Trainer.SlotReloads(); n != 0 {
		t.Errorf("%d slot reloads before the refusal", n)
	}
}
