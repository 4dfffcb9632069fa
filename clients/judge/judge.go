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

// ChatRequest is one chat completion request; the model comes from the
// client's configuration.
type ChatRequest struct {
	Messages    []Message
	MaxTokens   int
	Temperature float64
	// Seed is sent when non-nil.
	Seed *int64
}
