// Package judge is the client of the judge role: any OpenAI-compatible chat
// completions endpoint (PROTOCOLS.md §3) hosting a frozen judge model.
package judge

import "context"

// Judge writes one chat completion for the orchestrator's critique prompt.
type Judge interface {
	// Chat returns choices[0].message.content for messages.
	Chat(ctx context.Context, req ChatRequest) (string, error)
	// URL is the server's base URL.
	URL() string
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Sampling is every sampling setting a chat request carries. A vLLM judge
// fills each field a request omits from its model's generation_config.json,
// so with APIVLLM all of them are sent; with APIOpenAI only the ones
// OpenAI's chat API defines (temperature, top_p, presence_penalty,
// frequency_penalty) are, and the others must be neutral (top_k -1 or 0,
// min_p 0, repetition_penalty 1).
type Sampling struct {
	// Temperature divides the logits (0: greedy).
	Temperature float64
	// TopP is the nucleus mass ((0, 1]; 1: off).
	TopP float64
	// TopK keeps the k most likely tokens (-1: off).
	TopK int
	// MinP drops tokens less likely than MinP times the most likely one
	// (0: off).
	MinP float64
	// RepetitionPenalty scales the logits of tokens already in the prompt
	// or the output (1: off).
	RepetitionPenalty float64
	// PresencePenalty and FrequencyPenalty penalise output tokens (0: off).
	PresencePenalty  float64
	FrequencyPenalty float64
}

// Neutral returns the settings that sample from the judge model's own
// distribution: temperature 1, top_p 1, top_k -1, min_p 0,
// repetition_penalty 1, no presence or frequency penalty.
func Neutral() Sampling {
	return Sampling{Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1}
}

// Greedy returns Neutral with temperature 0.
func Greedy() Sampling {
	s := Neutral()
	s.Temperature = 0
	return s
}

// ChatRequest is one chat completion request; the model comes from the
// client's configuration.
type ChatRequest struct {
	Messages []Message
	// MaxTokens caps the completion; it is sent as the client's max-tokens
	// field (see WithMaxTokensField).
	MaxTokens int
	// Sampling is sent field by field, as the client's API allows (see
	// WithAPI).
	Sampling
	// Seed is sent when non-nil.
	Seed *int64
}
