package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Client is the Policy of one vLLM (or SGLang) OpenAI-compatible server.
type Client struct {
	tc *transport.Client
}

var _ Policy = (*Client)(nil)

// New builds the client of the policy server described by opts (opts.Role
// defaults to "policy").
func New(opts transport.Options) (*Client, error) {
	if opts.Role == "" {
		opts.Role = "policy"
	}
	tc, err := transport.New(opts)
	if err != nil {
		return nil, err
	}
	return &Client{tc: tc}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Close closes idle connections.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the server. A session in ctx
// (WithSession) goes as the X-Session-ID header.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	if id, ok := ctx.Value(sessionKey{}).(string); ok && id != "" {
		return c.tc.DoCall(ctx, transport.Call{Headers: map[string]string{SessionHeader: id}}, method, path, in, out)
	}
	return c.tc.Do(ctx, method, path, in, out)
}

// SessionHeader is the header a session id travels in: vllm-router's
// consistent_hash policy sends the requests of one X-Session-ID to one
// worker (its docs/load_balancing/README.md; the header outranks every
// other key it hashes).
const SessionHeader = "X-Session-ID"

type sessionKey struct{}

// WithSession returns ctx carrying session id: the requests a Client
// sends under it carry SessionHeader, so that a router in front of the
// policy servers keeps them on one server (its prefix cache). "" sends
// none.
func WithSession(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sessionKey{}, id)
}

type completionBody struct {
	Model                  string   `json:"model"`
	Prompt                 []int    `json:"prompt"`
	MaxTokens              int      `json:"max_tokens"`
	Temperature            float64  `json:"temperature"`
	TopP                   float64  `json:"top_p"`
	TopK                   int      `json:"top_k"`
	MinP                   float64  `json:"min_p"`
	RepetitionPenalty      float64  `json:"repetition_penalty"`
	PresencePenalty        float64  `json:"presence_penalty"`
	FrequencyPenalty       float64  `json:"frequency_penalty"`
	Seed                   *int64   `json:"seed,omitempty"`
	N                      int      `json:"n"`
	Stop                   []string `json:"stop"`
	IncludeStopStrInOutput bool     `json:"include_stop_str_in_output"`
	SkipSpecialTokens      bool     `json:"skip_special_tokens"`
	Logprobs               int      `json:"logprobs"`
	ReturnTokensAsTokenIDs bool     `json:"return_tokens_as_token_ids"`
}

type completionResponse struct {
	Choices []completionChoice `json:"choices"`
}

type completionChoice struct {
	Text         string              `json:"text"`
	FinishReason *string             `json:"finish_reason"`
	StopReason   json.RawMessage     `json:"stop_reason"`
	TokenIDs     []int               `json:"token_ids"`
	Logprobs     *completionLogprobs `json:"logprobs"`
}

type completionLogprobs struct {
	Tokens        []string   `json:"tokens"`
	TokenLogprobs []*float64 `json:"token_logprobs"`
	TextOffset    []int      `json:"text_offset"`
}

// Complete samples one continuation of req.Prompt (POST /v1/completions,
// token-id prompt, every sampling field of req.Sampling sent) and returns
// the sampled token ids and logprobs as the server reported them.
func (c *Client) Complete(ctx context.Context, req CompletionRequest) (*Completion, error) {
	if len(req.Prompt) == 0 {
		return nil, errors.New("policy complete: empty prompt")
	}
	stop := req.Stop
	if stop == nil {
		stop = []string{}
	}
	body := completionBody{
		Model:                  req.Model,
		Prompt:                 req.Prompt,
		MaxTokens:              req.MaxTokens,
		Temperature:            req.Temperature,
		TopP:                   req.TopP,
		TopK:                   req.TopK,
		MinP:                   req.MinP,
		RepetitionPenalty:      req.RepetitionPenalty,
		PresencePenalty:        req.PresencePenalty,
		FrequencyPenalty:       req.FrequencyPenalty,
		Seed:                   req.Seed,
		N:                      1,
		Stop:                   stop,
		IncludeStopStrInOutput: true,
		SkipSpecialTokens:      false,
		Logprobs:               1,
		ReturnTokensAsTokenIDs: true,
	}
	var d completionDecoder
	if err := c.do(ctx, http.MethodPost, "/v1/completions", body, &d); err != nil {
		return nil, fmt.Errorf("policy complete: %w", err)
	}
	if d.bad != nil {
		return nil, fmt.Errorf("policy complete %s: %w", c.URL(), d.bad)
	}
	return d.out, nil
}

// parseCompletion reads the first choice of a decoded answer.
func parseCompletion(resp *completionResponse) (*Completion, error) {
	if len(resp.Choices) == 0 {
		return nil, errors.New("no choices in response")
	}
	ch := resp.Choices[0]
	if ch.Logprobs == nil {
		return nil, errors.New("no logprobs in response")
	}
	lp := ch.Logprobs
	ids := make([]int, len(lp.Tokens))
	for i, tok := range lp.Tokens {
		id, err := parseTokenID(tok)
		if err != nil {
			return nil, fmt.Errorf("token %d: %w", i, err)
		}
		ids[i] = id
	}
	if ch.TokenIDs != nil {
		if len(ch.TokenIDs) != len(ids) {
			return nil, fmt.Errorf("token_ids has %d tokens, logprobs.tokens %d", len(ch.TokenIDs), len(ids))
		}
		ids = ch.TokenIDs
	}
	if len(lp.TokenLogprobs) != len(ids) {
		return nil, fmt.Errorf("%d token logprobs for %d tokens", len(lp.TokenLogprobs), len(ids))
	}
	if lp.TextOffset != nil && len(lp.TextOffset) != len(ids) {
		return nil, fmt.Errorf("%d text offsets for %d tokens", len(lp.TextOffset), len(ids))
	}
	logprobs := make([]float64, len(ids))
	for i, p := range lp.TokenLogprobs {
		if p == nil {
			return nil, fmt.Errorf("token %d: null logprob", i)
		}
		logprobs[i] = *p
	}
	out := &Completion{
		Text:        ch.Text,
		TokenIDs:    ids,
		Logprobs:    logprobs,
		TextOffsets: lp.TextOffset,
	}
	if ch.FinishReason != nil {
		out.FinishReason = *ch.FinishReason
	}
	if err := parseStopReason(ch.StopReason, out); err != nil {
		return nil, err
	}
	return out, nil
}

// parseTokenID parses vLLM's "token_id:<id>" form.
func parseTokenID(tok string) (int, error) {
	s, ok := strings.CutPrefix(tok, "token_id:")
	if !ok {
		return 0, fmt.Errorf("token %q not in token_id:<id> form (is return_tokens_as_token_ids supported?)", tok)
	}
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("token %q not in token_id:<id> form", tok)
	}
	return id, nil
}

// parseStopReason reads stop_reason: a stop string, a stop token id, or
// null.
func parseStopReason(raw json.RawMessage, out *Completion) error {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return nil
	}
	if s[0] == '"' {
		return json.Unmarshal(raw, &out.StopReason)
	}
	var id int
	if err := json.Unmarshal(raw, &id); err != nil {
		return fmt.Errorf("stop_reason %s: neither string, integer nor null", s)
	}
	out.StopTokenID = &id
	return nil
}

type promptLogprob struct {
	Logprob      *float64 `json:"logprob"`
	Rank         *int     `json:"rank"`
	DecodedToken *string  `json:"decoded_token"`
}

// scoreBody is the request body of Score: the sequence as the prompt, one
// greedy token, and prompt logprobs. Prompt logprobs are the raw model's
// whatever the sampling fields say; they are sent all the same (Greedy), so
// that the one token sampled is not drawn with the model's generation
// config either.
type scoreBody struct {
	Model             string  `json:"model"`
	Prompt            []int   `json:"prompt"`
	MaxTokens         int     `json:"max_tokens"`
	Temperature       float64 `json:"temperature"`
	TopP              float64 `json:"top_p"`
	TopK              int     `json:"top_k"`
	MinP              float64 `json:"min_p"`
	RepetitionPenalty float64 `json:"repetition_penalty"`
	PresencePenalty   float64 `json:"presence_penalty"`
	FrequencyPenalty  float64 `json:"frequency_penalty"`
	N                 int     `json:"n"`
	PromptLogprobs    int     `json:"prompt_logprobs"`
}

// Score returns the logprob of every token of seq given the tokens before
// it under model (POST /v1/completions with prompt_logprobs 0, max_tokens 1
// and Greedy sampling). Entry 0 is 0.
func (c *Client) Score(ctx context.Context, model string, seq []int) ([]float64, error) {
	if len(seq) == 0 {
		return nil, errors.New("policy score: empty sequence")
	}
	g := Greedy()
	body := scoreBody{
		Model: model, Prompt: seq, MaxTokens: 1,
		Temperature: g.Temperature, TopP: g.TopP, TopK: g.TopK, MinP: g.MinP,
		RepetitionPenalty: g.RepetitionPenalty, PresencePenalty: g.PresencePenalty, FrequencyPenalty: g.FrequencyPenalty,
		N: 1, PromptLogprobs: 0,
	}
	var resp struct {
		Choices []struct {
			PromptLogprobs []map[string]promptLogprob `json:"prompt_logprobs"`
		} `json:"choices"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/completions", body, &resp); err != nil {
		return nil, fmt.Errorf("policy score: %w", err)
	}
	fail := func(format string, a ...any) error {
		return fmt.Errorf("policy score %s: %s", c.URL(), fmt.Sprintf(format, a...))
	}
	if len(resp.Choices) == 0 {
		return nil, fail("no choices in response")
	}
	pl := resp.Choices[0].PromptLogprobs
	if pl == nil {
		return nil, fail("no prompt_logprobs in response")
	}
	if len(pl) != len(seq) {
		return nil, fail("%d prompt logprobs for %d tokens", len(pl), len(seq))
	}
	out := make([]float64, len(seq))
	for i := 1; i < len(seq); i++ {
		e, ok := pl[i][strconv.Itoa(seq[i])]
		if !ok || e.Logprob == nil {
			return nil, fail("no prompt logprob for token %d at position %d", seq[i], i)
		}
		out[i] = *e.Logprob
	}
	return out, nil
}

// tokenizeBody is the body of Tokenize.
type tokenizeBody struct {
	AddSpecialTokens bool   `json:"add_special_tokens"`
	Model            string `json:"model"`
	Prompt           string `json:"prompt"`
}

type tokenizeResponse struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"`
	Tokens      []int `json:"tokens"`
}

// Tokenize tokenizes text without a chat template (POST /tokenize).
func (c *Client) Tokenize(ctx context.Context, model, text string, addSpecialTokens bool) ([]int, error) {
	body := tokenizeBody{AddSpecialTokens: addSpecialTokens, Model: model, Prompt: text}
	var d tokensDecoder
	if err := c.do(ctx, http.MethodPost, "/tokenize", body, &d); err != nil {
		return nil, fmt.Errorf("policy tokenize: %w", err)
	}
	return d.ids, nil
}

// completionDecoder and tokensDecoder decode answers through the
// transport, so a malformed one is retried. A completion answer that is
// well-formed JSON but unusable (bad is set) is not retried.
type completionDecoder struct {
	out *Completion
	bad error
}

func (d *completionDecoder) DecodeJSON(b []byte) (err error) {
	d.out, d.bad, err = decodeCompletion(b)
	return err
}

type tokensDecoder struct{ ids []int }

func (d *tokensDecoder) DecodeJSON(b []byte) (err error) {
	d.ids, err = decodeTokens(b)
	return err
}

// decodeCompletion reads a /v1/completions answer into a Completion. A
// body that is not JSON of the answer's shape is an error (the transport
// retries it as a malformed answer); a well-formed answer that
// parseCompletion rejects comes back as bad, with the reason.
func decodeCompletion(raw []byte) (c *Completion, bad error, err error) {
	var resp completionResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, nil, err
	}
	c, bad = parseCompletion(&resp)
	return c, bad, nil
}

// decodeTokens reads the ids of a /tokenize answer.
func decodeTokens(raw []byte) ([]int, error) {
	var resp tokenizeResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, err
	}
	if resp.Tokens == nil {
		return nil, errors.New(`no "tokens" array`)
	}
	return resp.Tokens, nil
}

// TokenizeChat applies the server's chat template to messages and tokenizes
// the result (POST /tokenize with messages). Every field of vLLM's
// TokenizeChatRequest that changes the ids is sent: add_generation_prompt
// as asked, continue_final_message false and add_special_tokens false (the
// template writes the special tokens itself).
func (c *Client) TokenizeChat(ctx context.Context, model string, messages []Message, addGenerationPrompt bool) ([]int, error) {
	if messages == nil {
		messages = []Message{}
	}
	body := map[string]any{"model": model, "messages": messages, "add_generation_prompt": addGenerationPrompt,
		"continue_final_message": false, "add_special_tokens": false}
	var d tokensDecoder
	if err := c.do(ctx, http.MethodPost, "/tokenize", body, &d); err != nil {
		return nil, fmt.Errorf("policy tokenize chat: %w", err)
	}
	return d.ids, nil
}

// errLoRADisabled explains a missing LoRA route.
const errLoRADisabled = "lora runtime loading is disabled: start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"

// ErrLoRADisabled is wrapped by LoadLoRA and UnloadLoRA errors when the
// server has no runtime LoRA routes.
var ErrLoRADisabled = errors.New(errLoRADisabled)

// routeMissing reports whether err is the server's answer to an unknown
// route: 405, or 404 with FastAPI's {"detail":"Not Found"} or no body (vLLM
// answers 404 with its own error object when the adapter itself is
// missing).
func routeMissing(err error) bool {
	var se *transport.StatusError
	if !errors.As(err, &se) {
		return false
	}
	if se.Status == http.StatusMethodNotAllowed {
		return true
	}
	if se.Status != http.StatusNotFound {
		return false
	}
	b := strings.TrimSpace(se.Body)
	if b == "" || b == "Not Found" || strings.HasPrefix(b, "404 page not found") {
		return true
	}
	var d struct {
		Detail any `json:"detail"`
	}
	return json.Unmarshal([]byte(b), &d) == nil && d.Detail == "Not Found"
}

// LoadLoRA loads the PEFT adapter in directory path under name (POST
// /v1/load_lora_adapter). The answer may be plain text.
func (c *Client) LoadLoRA(ctx context.Context, name, path string) error {
	body := map[string]any{"lora_name": name, "lora_path": path}
	if err := c.do(ctx, http.MethodPost, "/v1/load_lora_adapter", body, nil); err != nil {
		if routeMissing(err) {
			return fmt.Errorf("policy load lora %q at %s: %w", name, c.URL(), ErrLoRADisabled)
		}
		return fmt.Errorf("policy load lora %q: %w", name, err)
	}
	return nil
}

// UnloadLoRA unloads adapter name (POST /v1/unload_lora_adapter).
func (c *Client) UnloadLoRA(ctx context.Context, name string) error {
	body := map[string]any{"lora_name": name}
	if err := c.do(ctx, http.MethodPost, "/v1/unload_lora_adapter", body, nil); err != nil {
		if routeMissing(err) {
			return fmt.Errorf("policy unload lora %q at %s: %w", name, c.URL(), ErrLoRADisabled)
		}
		return fmt.Errorf("policy unload lora %q: %w", name, err)
	}
	return nil
}

// Health returns nil when GET /health answers 200.
func (c *Client) Health(ctx context.Context) error {
	if err := c.do(ctx, http.MethodGet, "/health", nil, nil); err != nil {
		return fmt.Errorf("policy health: %w", err)
	}
	return nil
}

// Models lists the model ids the server serves (GET /v1/models).
func (c *Client) Models(ctx context.Context) ([]string, error) {
	var resp struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/models", nil, &resp); err != nil {
		return nil, fmt.Errorf("policy models: %w", err)
	}
	ids := make([]string, len(resp.Data))
	for i, d := range resp.Data {
		ids[i] = d.ID
	}
	return ids, nil
}

// ErrAlreadyLoaded is wrapped by a client whose server has no refusal of
// its own for a name loaded twice (a Tinker client serving a name it
// already serves); AlreadyLoaded recognises it.
var ErrAlreadyLoaded = errors.New("already loaded")

// AlreadyLoaded reports an error of LoadLoRA saying the adapter is already
// loaded, which a retried load may meet when the first attempt did take:
// vLLM answers 400 "... has already been loaded ..." (models/serving.py
// _check_load_lora_adapter_request), SGLang 400 {"success": false,
// "error_message": "Failed to load LoRA adapter N because it is already
// loaded"} (lora/lora_manager.py).
func AlreadyLoaded(err error) bool {
	if errors.Is(err, ErrAlreadyLoaded) {
		return true
	}
	var se *transport.StatusError
	return errors.As(err, &se) && se.Status == http.StatusBadRequest &&
		(strings.Contains(se.Body, "already been loaded") || strings.Contains(se.Body, "because it is already loaded"))
}

// ReplicaDown reports an error meaning the replica cannot serve now: it
// could not be reached (after the transport's retries), answered 503 (a dead
// engine), or does not serve the model asked for (a restarted replica that
// lost its adapters: vLLM's 404 "... does not exist", SGLang's 400 "Got LoRA
// adapter that has never been loaded: N" from /generate,
// managers/tokenizer_manager.py _resolve_lora_path). The caller should use
// another replica.
func ReplicaDown(err error) bool {
	var se *transport.StatusError
	if errors.As(err, &se) {
		return se.Status == http.StatusServiceUnavailable ||
			se.Status == http.StatusNotFound && strings.Contains(se.Body, "does not exist") ||
			se.Status == http.StatusBadRequest && strings.Contains(se.Body, "has never been loaded")
	}
	// A connection refused or reset, or closed without an answer (EOF)
	// after the transport's retries: the replica is not serving.
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
