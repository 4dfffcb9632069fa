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
	tc             *transport.Client
	model          string
	api            string
	maxTokensField string
}

var _ Judge = (*Client)(nil)

// The judge APIs a client can speak (WithAPI).
const (
	// APIVLLM is vLLM's OpenAI-compatible server (the default): every
	// sampling field is sent, top_k, min_p and repetition_penalty included,
	// because vLLM takes each omitted one from the model's
	// generation_config.json.
	APIVLLM = "vllm"
	// APIOpenAI is OpenAI's hosted chat API, which rejects fields it does
	// not define ("Unrecognized request argument supplied: top_k"): only
	// temperature, top_p, presence_penalty, frequency_penalty and seed are
	// sent.
	APIOpenAI = "openai"
)

// The fields a client can send the token cap in (WithMaxTokensField).
const (
	// MaxTokensField is "max_tokens" (the default; vLLM and older OpenAI
	// models).
	MaxTokensField = "max_tokens"
	// MaxCompletionTokensField is "max_completion_tokens", which newer
	// hosted OpenAI models require (they answer 400 to max_tokens); vLLM
	// accepts it too.
	MaxCompletionTokensField = "max_completion_tokens"
)

// Option configures a Client's wire format.
type Option func(*Client) error

// WithAPI makes the client speak api: APIVLLM or APIOpenAI.
func WithAPI(api string) Option {
	return func(c *Client) error {
		if api != APIVLLM && api != APIOpenAI {
			return fmt.Errorf("api %q: want %s or %s", api, APIVLLM, APIOpenAI)
		}
		c.api = api
		return nil
	}
}

// WithMaxTokensField makes the client send the token cap as field:
// MaxTokensField or MaxCompletionTokensField.
func WithMaxTokensField(field string) Option {
	return func(c *Client) error {
		if field != MaxTokensField && field != MaxCompletionTokensField {
			return fmt.Errorf("max tokens field %q: want %s or %s", field, MaxTokensField, MaxCompletionTokensField)
		}
		c.maxTokensField = field
		return nil
	}
}

// New builds the client of the judge server described by opts (opts.Role
// defaults to "judge"), asking for model, with APIVLLM and MaxTokensField
// unless options say otherwise. When apiKey is not empty it is sent as
// "Authorization: Bearer <apiKey>"; it never appears in errors.
func New(opts transport.Options, model, apiKey string, options ...Option) (*Client, error) {
	if opts.Role == "" {
		opts.Role = "judge"
	}
	if model == "" {
		return nil, fmt.Errorf("%s %s: no model", opts.Role, opts.BaseURL)
	}
	c := &Client{model: model, api: APIVLLM, maxTokensField: MaxTokensField}
	for _, o := range options {
		if err := o(c); err != nil {
			return nil, fmt.Errorf("%s %s: %w", opts.Role, opts.BaseURL, err)
		}
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
	c.tc = tc
	return c, nil
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

// chatBody is the request body; the pointer fields are the ones that
// depend on the client's API and max-tokens field.
type chatBody struct {
	Model               string    `json:"model"`
	Messages            []Message `json:"messages"`
	MaxTokens           *int      `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int      `json:"max_completion_tokens,omitempty"`
	Temperature         float64   `json:"temperature"`
	TopP                float64   `json:"top_p"`
	TopK                *int      `json:"top_k,omitempty"`
	MinP                *float64  `json:"min_p,omitempty"`
	RepetitionPenalty   *float64  `json:"repetition_penalty,omitempty"`
	PresencePenalty     float64   `json:"presence_penalty"`
	FrequencyPenalty    float64   `json:"frequency_penalty"`
	Seed                *int64    `json:"seed,omitempty"`
}

// body builds the request body of req for the client's API. With
// APIOpenAI, a top_k, min_p or repetition_penalty that is not neutral is an
// error: the hosted API has no such setting, and dropping it would sample
// otherwise than asked.
func (c *Client) body(req ChatRequest) (chatBody, error) {
	msgs := req.Messages
	if msgs == nil {
		msgs = []Message{}
	}
	sp := req.Sampling
	b := chatBody{Model: c.model, Messages: msgs, Temperature: sp.Temperature, TopP: sp.TopP,
		PresencePenalty: sp.PresencePenalty, FrequencyPenalty: sp.FrequencyPenalty, Seed: req.Seed}
	maxTokens := req.MaxTokens
	if c.maxTokensField == MaxCompletionTokensField {
		b.MaxCompletionTokens = &maxTokens
	} else {
		b.MaxTokens = &maxTokens
	}
	if c.api == APIOpenAI {
		if (sp.TopK != -1 && sp.TopK != 0) || sp.MinP != 0 || sp.RepetitionPenalty != 1 {
			return b, fmt.Errorf("top_k %d, min_p %g, repetition_penalty %g: api %s takes only neutral values (-1, 0, 1)", sp.TopK, sp.MinP, sp.RepetitionPenalty, APIOpenAI)
		}
		return b, nil
	}
	b.TopK, b.MinP, b.RepetitionPenalty = &sp.TopK, &sp.MinP, &sp.RepetitionPenalty
	return b, nil
}

// Chat sends POST /v1/chat/completions and returns
// choices[0].message.content.
func (c *Client) Chat(ctx context.Context, req ChatRequest) (string, error) {
	body, err := c.body(req)
	if err != nil {
		return "", fmt.Errorf("judge chat: %w", err)
	}
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
