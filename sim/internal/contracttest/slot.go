package contracttest

import (
	"context"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/clients/trainer"
)

// SlotProbe is what the shared-slot experiment measured: the mean prompt
// logprob of a fixed sequence under each sampler checkpoint.
type SlotProbe struct {
	// W1 and W2 are the first and second saves, scored before anything
	// reloads a checkpoint; After is a save made after sampling W1 again.
	W1, W2, After float64
}

// SharedSlot runs the source audit's B1 on a Tinker server: train a step
// and save for sampling (W1), train another and save (W2), sample W1
// again, then save once more without training (After). Each step is one
// importance-sampling datum over tokens at learning rate lr. A server that
// samples each checkpoint in a slot of its own gives After == W2; SkyRL's
// JAX backend loads the sampled checkpoint into the slot it trains
// (backends/jax.py load_sampler_checkpoint), so After == W1: sampling an
// older checkpoint rolled the training weights back.
func SharedSlot(t *testing.T, tc *trainer.Client, base string, vocab tinker.IDBytes, tokens []int, lr float64) SlotProbe {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := tc.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, err := tc.CreateModel(ctx, s, base, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = tc.UnloadModel(ctx, id)
	})
	p, err := tinker.New(tc, tinker.Options{BaseModel: base, Tokens: vocab, EndTokens: []string{"<|im_end|>"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	step := func() {
		t.Helper()
		if _, err := tc.ForwardBackward(ctx, id, []trainer.Datum{ImportanceDatum(tokens)}, "importance_sampling", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := tc.OptimStep(ctx, id, trainer.AdamParams{LearningRate: lr, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}); err != nil {
			t.Fatal(err)
		}
	}
	save := func(name string) {
		t.Helper()
		ss, err := tc.SaveForSampling(ctx, s, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.Serve(name, ss.SessionID)
	}
	mean := func(name string) float64 {
		t.Helper()
		lps, err := p.Score(ctx, name, tokens)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, lp := range lps[1:] {
			sum += lp
		}
		return sum / float64(len(lps)-1)
	}
	var got SlotProbe
	step()
	save("w1")
	got.W1 = mean("w1")
	step()
	save("w2")
	got.W2 = mean("w2")
	mean("w1") // sample the older checkpoint again
	save("after")
	got.After = mean("after")
	return got
}

// SlotText is the sequence SharedSlot trains on and scores.
const SlotText = "Question: who wrote The Old Man and the Sea? <answer> Ernest Hemingway </answer>"

// ImportanceDatum is an importance-sampling datum over toks: next-token
// targets, the second half weighted with advantage 1 and sampling logprob
// -2.
func ImportanceDatum(toks []int) trainer.Datum {
	n := len(toks) - 1
	targets := make([]int64, n)
	lps, advs, ws := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		targets[i] = int64(toks[i+1])
		if i >= n/2 {
			ws[i], advs[i], lps[i] = 1, 1, -2
		}
	}
	return trainer.Datum{
		ModelInput: trainer.ModelInput{Chunks: []trainer.Chunk{{Type: "encoded_text", Tokens: toks[:n]}}},
		LossFnInputs: map[string]trainer.TensorData{"target_tokens": trainer.Int64Tensor(targets), "weights": trainer.Float32Tensor(ws),
			"logprobs": trainer.Float32Tensor(lps), "advantages": trainer.Float32Tensor(advs)},
	}
}
