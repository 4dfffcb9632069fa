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
	// place, with the full model (a merged Hugging Face directory, or the
	// model the server was started with) at path, which the server must be
	// able to read (SGLang's POST /update_weights_from_disk; on success
	// SGLang then serves the model under the name path). It returns nil only
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

// Sampling is every sampling setting a request sends. vLLM fills each field
// a request omits from the model's generation_config.json (Qwen2.5 instruct
// models ship temperature 0.7, top_p 0.8, top_k 20, repetition_penalty
// 1.05) while it keeps reporting the raw model's logprobs, so the program
// sends all of them, always: what a request samples with is what the recipe
// says, whatever model the server loaded.
type Sampling struct {
	// Temperature divides the logits (0: greedy; vLLM accepts [0, 2]).
	Temperature float64
	// TopP keeps the smallest set of most likely tokens holding that much
	// probability ((0, 1]; 1: off).
	TopP float64
	// TopK keeps the k most likely tokens; -1 is off (vLLM takes -1 and 0
	// as off in current versions, and only -1 in older ones).
	TopK int
	// MinP drops tokens less likely than MinP times the most likely one
	// ([0, 1]; 0: off).
	MinP float64
	// RepetitionPenalty scales the logits of every token already in the
	// prompt or the output (> 0; 1: off).
	RepetitionPenalty float64
	// PresencePenalty and FrequencyPenalty are subtracted from the logits
	// of output tokens, once and once per occurrence ([-2, 2]; 0: off).
	PresencePenalty  float64
	FrequencyPenalty float64
}

// Neutral returns the settings that sample from the model's own
// distribution, unchanged: temperature 1, top_p 1, top_k -1, min_p 0,
// repetition_penalty 1 and no presence or frequency penalty. Only with
// these is the raw logprob vLLM reports the logprob of the distribution a
// token was drawn from.
func Neutral() Sampling {
	return Sampling{Temperature: 1, TopP: 1, TopK: -1, MinP: 0, RepetitionPenalty: 1}
}

// Greedy returns Neutral with temperature 0: the most likely token of the
// unpenalised distribution (vLLM applies the repetition, presence and
// frequency penalties before its greedy argmax, so they must be off too).
func Greedy() Sampling {
	s := Neutral()
	s.Temperature = 0
	return s
}

// CompletionRequest is one sampling request. Every sampling field is sent
// explicitly, because the server falls back to the model's generation config
// for omitted ones.
type CompletionRequest struct {
	Model     string
	Prompt    []int
	MaxTokens int
	// Sampling is sent field by field (see Sampling).
	Sampling
	// Seed, when non-nil, makes the request reproducible.
	Seed *int64
	// Stop strings; the stop string is kept in the output.
	Stop []string
}

// Completion is the result of one sampling request.
type Completion struct {
	// Text is the decoded continuation.
	Text string
	// TokenIDs are the sampled token ids, in order.
	TokenIDs []int
	// Logprobs[i] is the logprob the server reported for TokenIDs[i].
	Logprobs []float64
	// TextOffsets are the server's logprobs.text_offset, as reported. They
	// are not positions in Text on vLLM: under return_tokens_as_token_ids
	// it sums the lengths of the "token_id:N" strings (PROTOCOLS.md §6).
	// Locate text by the ids' bytes under the model's tokenizer instead.
	TextOffsets []int
	// FinishReason is "stop" or "length".
	FinishReason string
	// StopReason is the matched stop string, if any.
	StopReason string
	// StopTokenID is the stop token id that ended the completion, when the
	// server reported one (stop_reason as an integer), else nil.
	StopTokenID *int
}
