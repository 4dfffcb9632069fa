package judge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Client is the Judge of one OpenAI-compatible chat completions server.
type Client struct {
	tc    *transport.Client
	model string
}

var _ Judge = (*Client)(nil)

// New builds the client of the judge server described by opts (opts.Role
// defaults to "judge"), asking for model. When apiKey is not empty it is
// sent as "Authorization: Bearer <apiKey>"; it never appears in errors.
func New(opts transport.Options, model, apiKey string) (*Client, error) {
	if opts.Role == "" {
		opts.Role = "judge"
	}
	if model == "" {
		return nil, fmt.Errorf("%s %s: no model", opts.Role, opts.BaseURL)
	}
	headers := maps.Clone(opts.Headers)
	if apiKey != "" {
		if headers == nil {
			headers = map[string]string{}
		}
		headers["Authorization"] = "Bearer " + apiKey
	}
	opts.Headers = headers
	tc, err := transport.New(opts)
	if err != nil {
		return nil, err
	}
	return &Client{tc: tc, model: model}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Model returns the model the client asks for.
func (c *Client) Model() string { return c.model }

// Close closes idle connections.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the server.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.tc.Do(ctx, method, path, in, out)
}

type chatBody struct {
	Model       string    `json:"model"`
	Messages    []Message `json:"messages"`
	MaxTokens   int       `json:"max_tokens"`
	Temperature float64   `json:"temperature"`
	Seed        *int64    `json:"seed,omitempty"`
}

// Chat sends POST /v1/chat/completions and returns
// choices[0].message.content.
func (c *Client) Chat(ctx context.Context, req ChatRequest) (string, error) {
	msgs := req.Messages
	if msgs == nil {
		msgs = []Message{}
	}
	body := chatBody{Model: c.model, Messages: msgs, MaxTokens: req.MaxTokens, Temperature: req.Temperature, Seed: req.Seed}
	var resp struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/chat/completions", body, &resp); err != nil {
		return "", fmt.Errorf("judge chat: %w", err)
	}
	if len(resp.Choices) == 0 {
		return "", fmt.Errorf("judge chat %s: %w", c.URL(), errors.New("no choices in response"))
	}
	content := resp.Choices[0].Message.Content
	if content == nil {
		return "", fmt.Errorf("judge chat %s: %w", c.URL(), errors.New("null message content"))
	}
	return *content, nil
}
