package judge

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
)

// Completer samples a continuation of token ids: the client of a server
// that takes token ids and has no chat route (a Tinker server's asample,
// clients/policy/tinker).
type Completer interface {
	Complete(ctx context.Context, req policy.CompletionRequest) (*policy.Completion, error)
	URL() string
}

// TokenChat is a Judge over a Completer (judge.api tinker): the messages
// are rendered with the judge model's chat template and tokenized in this
// process, the continuation is sampled from the base model, and its text,
// up to the first end token, is the critique.
type TokenChat struct {
	c      Completer
	model  string
	render func(msgs []Message) string
	encode func(text string) []int
	end    []string
}

var _ Judge = (*TokenChat)(nil)

// NewTokenChat returns the judge that samples model through c. render is
// the model's chat template with the generation prompt; encode tokenizes
// its text (special tokens recognised); end are the model's end-of-turn
// token texts, where the critique stops.
func NewTokenChat(c Completer, model string, render func(msgs []Message) string, encode func(text string) []int, end []string) (*TokenChat, error) {
	if c == nil || render == nil || encode == nil || model == "" {
		return nil, errors.New("judge: a token-level judge needs a sampler, a model, its chat template and its tokenizer")
	}
	if len(end) == 0 {
		return nil, fmt.Errorf("judge %s: no end-of-turn token for %s: the critique would run to max_tokens", c.URL(), model)
	}
	return &TokenChat{c: c, model: model, render: render, encode: encode, end: end}, nil
}

// URL returns the server's base URL.
func (j *TokenChat) URL() string { return j.c.URL() }

// Unavailable is a Judge that cannot be had (its tokenizer is missing,
// say): every Chat fails with Err, so that doctor reports it as a check
// and a run fails with it at its first critique.
type Unavailable struct {
	Server string
	Err    error
}

var _ Judge = Unavailable{}

// Chat returns u.Err.
func (u Unavailable) Chat(context.Context, ChatRequest) (string, error) {
	return "", fmt.Errorf("judge critique %s: %w", u.Server, u.Err)
}

// URL returns u.Server.
func (u Unavailable) URL() string { return u.Server }

// Chat samples the critique: temperature and top_p as req says; a Tinker
// server has no top_k, min_p, repetition, presence or frequency setting
// beyond top_k, so those must be neutral.
func (j *TokenChat) Chat(ctx context.Context, req ChatRequest) (string, error) {
	if req.MinP != 0 || (req.RepetitionPenalty != 1 && req.RepetitionPenalty != 0) || req.PresencePenalty != 0 || req.FrequencyPenalty != 0 {
		return "", fmt.Errorf("judge critique %s: min_p %g, repetition_penalty %g, presence_penalty %g, frequency_penalty %g: a token-level (Tinker) judge takes only neutral values",
			j.URL(), req.MinP, req.RepetitionPenalty, req.PresencePenalty, req.FrequencyPenalty)
	}
	prompt := j.encode(j.render(req.Messages))
	sp := policy.Sampling{Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, RepetitionPenalty: 1}
	if sp.TopP == 0 {
		sp.TopP = 1
	}
	c, err := j.c.Complete(ctx, policy.CompletionRequest{Model: j.model, Prompt: prompt, MaxTokens: req.MaxTokens, Sampling: sp, Seed: req.Seed, Stop: j.end})
	if err != nil {
		return "", fmt.Errorf("judge critique: %w", err)
	}
	text := c.Text
	for _, e := range j.end {
		if i := strings.Index(text, e); i >= 0 {
			text = text[:i]
		}
	}
	// A thinking model (Qwen3's hybrid ones think unless told not to)
	// writes its reasoning first: the critique is what follows it.
	if strings.HasPrefix(strings.TrimSpace(text), "<think>") {
		if _, after, ok := strings.Cut(text, "</think>"); ok {
			text = after
		}
	}
	return strings.TrimSpace(text), nil
}
