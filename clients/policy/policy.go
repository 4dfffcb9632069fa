// Package policy is the client of the policy role: vLLM's (or SGLang's)
// OpenAI-compatible server hosting the student, spoken exactly as described
// in PROTOCOLS.md §2. Token ids go in and come back out; nothing is
// re-derived from text.
package policy

import "context"

// Policy is what the orchestrator needs from one policy replica.
type Policy interface {
	// Complete samples one continuation of the token-id prompt and returns
	// the sampled token ids with their logprobs, exactly as the server
	// reported them.
	Complete(ctx context.Context, req CompletionRequest) (*Completion, error)
	// Score returns the logprob of every token of seq given the tokens before
	// it, under model (prompt logprobs, no sampling). The result has
	// len(seq) entries; entry 0 has no context and is 0.
	Score(ctx context.Context, model string, seq []int) ([]float64, error)
	// Tokenize tokenizes plain text (no chat template).
	Tokenize(ctx context.Context, model, text string, addSpecialTokens bool) ([]int, error)
	// TokenizeChat applies the server's chat template to messages and
	// tokenizes the result.
	TokenizeChat(ctx context.Context, model string, messages []Message, addGenerationPrompt bool) ([]int, error)
	// LoadLoRA makes the server serve the PEFT adapter in directory path
	// under the model name name.
	LoadLoRA(ctx context.Context, name, path string) error
	// UnloadLoRA removes a loaded adapter.
	UnloadLoRA(ctx context.Context, name string) error
	// UpdateWeightsFromDisk replaces the weights the server serves, in
	// place and under the same model name, with the full model (a merged
	// Hugging Face directory) at path, which the server must be able to
	// read (SGLang's POST /update_weights_from_disk). It returns nil only
	// when the server reports success; a refusal is an error carrying the
	// server's message.
	UpdateWeightsFromDisk(ctx context.Context, path string) error
	// Health returns nil when GET /health answers 200.
	Health(ctx context.Context) error
	// Models lists the model ids the server serves (base and adapters).
	Models(ctx context.Context) ([]string, error)
	// URL is the server's base URL, for error messages and bookkeeping.
	URL() string
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// CompletionRequest is one sampling request. Every sampling field is sent
// explicitly, because the server falls back to the model's generation config
// for omitted ones.
type CompletionRequest struct {
	Model       string
	Prompt      []int
	MaxTokens   int
	Temperature float64
	TopP        float64
	// TopK is -1 for no top-k truncation.
	TopK int
	// Seed, when non-nil, makes the request reproducible.
	Seed *int64
	// Stop strings; the stop string is kept in the output.
	Stop []string
	// PromptCache, when non-nil, holds the encoded prompt of the
	// trajectory's previous request and keeps this one's (see
	// PromptCache); it must not be shared by concurrent requests.
	PromptCache *PromptCache
}

// Completion is the result of one sampling request.
type Completion struct {
	// Text is the decoded continuation.
	Text string
	// TokenIDs are the sampled token ids, in order.
	TokenIDs []int
	// Logprobs[i] is the logprob the server reported for TokenIDs[i].
	Logprobs []float64
	// TextOffsets[i] is the offset in Text where TokenIDs[i] starts.
	TextOffsets []int
	// FinishReason is "stop" or "length".
	FinishReason string
	// StopReason is the matched stop string, if any.
	StopReason string
	// StopTokenID is the stop token id that ended the completion, when the
	// server reported one (stop_reason as an integer), else nil.
	StopTokenID *int
}
