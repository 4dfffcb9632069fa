package orchestrator

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/sglang"
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
			if a, b := fmt.Sprint(vllm.Evals), fmt.Sprint(sg.Evals); a != b {
				t.Errorf("evaluations: vllm %s\nsglang %s", a, b)
			}
		})
	}
}
