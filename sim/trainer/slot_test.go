package trainer_test

import (
	"math"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/sim/internal/contracttest"
	"github.com/hindsearch/hindsearch/sim/lm"
	simtrainer "github.com/hindsearch/hindsearch/sim/trainer"
)

// The simulated JAX backend shares a model's training slot with its
// sampler checkpoints as SkyRL's does (seen running: sim/real's
// TestSkyRLJAXSharesTheTrainingSlot): sampling an older checkpoint loads
// it into the weights being trained, so a save made after it holds the
// older weights.
func TestJAXSharesTheTrainingSlot(t *testing.T) {
	ts := simtrainer.NewServer(sharedModel(t), contractBase, t.TempDir())
	ts.PollWait = 20 * time.Millisecond
	_, c := contractClient(t, ts)
	// A trajectory the simulated agent wrote: its parameters move the
	// logprobs of the agent's own choices, not of any text.
	tk := sharedModel(t).Tokenizer()
	prompt := tk.Encode("<|im_start|>system\n" + lm.SystemPrompt + "<|im_end|>\n<|im_start|>user\n" +
		format.UserPrompt("Who wrote the novel The Old Man and the Sea?", "") + "<|im_end|>\n<|im_start|>assistant\n")
	p, err := tinker.New(c, tinker.Options{BaseModel: contractBase, Tokens: tk, EndTokens: []string{"<|im_end|>"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	seed := int64(3)
	comp, err := p.Complete(t.Context(), policy.CompletionRequest{Model: contractBase, Prompt: prompt, MaxTokens: 200,
		Sampling: policy.Neutral(), Seed: &seed, Stop: format.StopStrings})
	if err != nil {
		t.Fatal(err)
	}
	got := contracttest.SharedSlot(t, c, contractBase, tk, append(prompt, comp.TokenIDs...), 0.5)
	if math.Abs(got.W1-got.W2) < 1e-6 {
		t.Fatalf("the second step did not change the weights: %+v", got)
	}
	if math.Abs(got.After-got.W1) > 1e-9 {
		t.Errorf("the save after sampling W1 again is not W1: %+v", got)
	}
	if n := ts.SlotReloads(); n != 1 {
		t.Errorf("%d reloads of an older checkpoint into a training slot counted, want 1", n)
	}
}
