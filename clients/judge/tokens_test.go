package judge

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
)

// completer records the request and answers text.
type completer struct {
	got  policy.CompletionRequest
	text string
}

func (c *completer) Complete(_ context.Context, req policy.CompletionRequest) (*policy.Completion, error) {
	c.got = req
	return &policy.Completion{Text: c.text, TokenIDs: []int{1}, Logprobs: []float64{-1}, FinishReason: "stop"}, nil
}

func (c *completer) URL() string { return "http://127.0.0.1:1" }

// A token-level judge renders the messages with the model's template,
// tokenizes them here, samples with the end tokens as stops and returns
// the text before the end token, a thinking model's reasoning left out.
func TestTokenChat(t *testing.T) {
	c := &completer{text: "<think>\nthe answer was Paris\n</think>\n\nSearch for the capital first.<|im_end|>"}
	render := func(msgs []Message) string {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString("[" + m.Role + "]" + m.Content)
		}
		return b.String() + "[assistant]"
	}
	encode := func(text string) []int { return []int{len(text)} }
	j, err := NewTokenChat(c, "Qwen/Qwen3-8B", render, encode, []string{"<|im_end|>", "<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	seed := int64(4)
	req := ChatRequest{Messages: []Message{{Role: "user", Content: "critique"}}, MaxTokens: 96, Sampling: Greedy(), Seed: &seed}
	got, err := j.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got != "Search for the capital first." {
		t.Errorf("critique %q", got)
	}
	want := policy.CompletionRequest{Model: "Qwen/Qwen3-8B", Prompt: []int{len("[user]critique[assistant]")}, MaxTokens: 96,
		Sampling: policy.Sampling{Temperature: 0, TopP: 1, TopK: -1, RepetitionPenalty: 1}, Seed: &seed}
	if c.got.Model != want.Model || !slices.Equal(c.got.Prompt, want.Prompt) || c.got.MaxTokens != 96 || c.got.Sampling != want.Sampling ||
		*c.got.Seed != 4 || !slices.Equal(c.got.Stop, []string{"<|im_end|>", "<|endoftext|>"}) {
		t.Errorf("request %+v", c.got)
	}
	req.MinP = 0.1
	if _, err := j.Chat(context.Background(), req); err == nil || !strings.Contains(err.Error(), "neutral") {
		t.Errorf("min_p 0.1: %v", err)
	}
	if _, err := NewTokenChat(c, "m", render, encode, nil); err == nil {
		t.Error("a judge without end tokens was made")
	}
}
