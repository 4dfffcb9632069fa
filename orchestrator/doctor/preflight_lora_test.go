package doctor

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
)

// noLoRA is a healthy vLLM server serving "base", started without runtime
// LoRA loading.
type noLoRA struct{ urlPolicy }

func (noLoRA) Health(context.Context) error             { return nil }
func (noLoRA) Models(context.Context) ([]string, error) { return []string{"base"}, nil }
func (noLoRA) UnloadLoRA(context.Context, string) error {
	return fmt.Errorf("policy unload lora: %w", policy.ErrLoRADisabled)
}

func TestPreflightLoRADisabled(t *testing.T) {
	r := recipes.Defaults()
	r.Policy.Model = "base"
	err := Preflight(context.Background(), &r, roles.Deps{Policies: []policy.Policy{noLoRA{urlPolicy{url: "http://gpu1:8000"}}}})
	if err == nil || !strings.Contains(err.Error(), "http://gpu1:8000") || !strings.Contains(err.Error(), "--enable-lora") ||
		!strings.Contains(err.Error(), "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True") {
		t.Fatalf("err %v", err)
	}
}
