package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// std is transport.Options.StdJSON: completion and /tokenize bodies
	// through encoding/json both ways, for orchestrate bench.
	std bool
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
	return &Client{tc: tc, std: opts.StdJSON}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Close closes idle connections.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the server.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.tc.Do(ctx, method, path, in, out)
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
	var in any = body
	if !c.std {
		enc, err := body.encodeWith(req.PromptCache)
		if err != nil {
			return nil, fmt.Errorf("policy complete: encode request: %w", err)
		}
		in = enc
	}
	d := completionDecoder{std: c.std}
	if err := c.do(ctx, http.MethodPost, "/v1/completions", in, &d); err != nil {
		return nil, fmt.Errorf("policy complete: %w", err)
	}
	if d.bad != nil {
		return nil, fmt.Errorf("policy complete %s: %w", c.URL(), d.bad)
	}
	return d.out, nil
}

// appendPromptHead appends the start of a completion body up to the last
// prompt id: {"model":...,"prompt":[ids.
func appendPromptHead(dst []byte, model string, prompt []int) []byte {
	if n := 256 + 7*len(prompt) + len(model); cap(dst)-len(dst) < n {
		dst = append(make([]byte, 0, len(dst)+n), dst...)
	}
	dst = append(dst, `{"model":`...)
	dst = appendJSONString(dst, model)
	dst = append(dst, `,"prompt":[`...)
	return appendInts(dst, prompt)
}

// PromptCache keeps the JSON of a growing token-id prompt between the
// completion requests of one trajectory, so that each request encodes only
// the ids added since the one before (a turn's prompt is the whole context
// so far, hundreds to thousands of ids, all but the last turn's
// unchanged). It belongs to one trajectory (not safe for concurrent use),
// and the prompts passed with it must each extend the one before by
// appending, as a trajectory's context does: the cache checks only the
// length and the first and last ids it holds, and a prompt that fails
// those checks, or comes for another model, is encoded afresh. The zero
// value is empty.
type PromptCache struct {
	model       string
	ids         int    // prompt ids encoded in buf
	first, last int    // the first and last of them
	buf         []byte // {"model":...,"prompt":[ and the ids
}

// EncodePrompt returns a PromptCache holding the encoding of prompt for
// model, for trajectories that start from the same prompt (a group) to
// copy with CopyFrom; it is only read after that.
func EncodePrompt(model string, prompt []int) *PromptCache {
	pc := &PromptCache{}
	if len(prompt) == 0 {
		return pc
	}
	pc.buf = appendPromptHead(nil, model, prompt)
	pc.model, pc.ids = model, len(prompt)
	pc.first, pc.last = prompt[0], prompt[len(prompt)-1]
	return pc
}

// CopyFrom makes pc hold the prompt src holds (src is only read).
func (pc *PromptCache) CopyFrom(src *PromptCache) {
	buf := pc.buf[:0]
	if cap(buf) < len(src.buf) {
		// Room for the turns to come, as appendPromptHead leaves.
		buf = make([]byte, 0, 2*len(src.buf)+256)
	}
	buf = append(buf, src.buf...)
	*pc = *src
	pc.buf = buf
}

// Empty reports whether pc holds no prompt.
func (pc *PromptCache) Empty() bool { return pc.ids == 0 }

// extends reports whether prompt, for model, extends the cached prompt.
func (pc *PromptCache) extends(model string, prompt []int) bool {
	return pc.ids > 0 && pc.model == model && len(prompt) >= pc.ids &&
		prompt[0] == pc.first && prompt[pc.ids-1] == pc.last
}

// parseCompletion reads the first choice of a decoded answer (the slow
// path; scanCompletion applies the same rules).
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

type tokenizeResponse struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"`
	Tokens      []int `json:"tokens"`
}

// Tokenize tokenizes text without a chat template (POST /tokenize).
func (c *Client) Tokenize(ctx context.Context, model, text string, addSpecialTokens bool) ([]int, error) {
	var in any = tokenizeBody(model, text, addSpecialTokens)
	if c.std {
		in = map[string]any{"model": model, "prompt": text, "add_special_tokens": addSpecialTokens}
	}
	d := tokensDecoder{std: c.std}
	if err := c.do(ctx, http.MethodPost, "/tokenize", in, &d); err != nil {
		return nil, fmt.Errorf("policy tokenize: %w", err)
	}
	return d.ids, nil
}

// completionDecoder and tokensDecoder decode hot answers through the
// transport, so a malformed one is retried. A completion answer that is
// well-formed JSON but unusable (bad is set) is not retried.
// With std set they use encoding/json alone (transport.Options.StdJSON).
type completionDecoder struct {
	std bool
	out *Completion
	bad error
}

func (d *completionDecoder) DecodeJSON(b []byte) (err error) {
	if d.std {
		d.out, d.bad, err = decodeCompletionStd(b)
		return err
	}
	d.out, d.bad, err = decodeCompletion(b)
	return err
}

type tokensDecoder struct {
	std bool
	ids []int
}

func (d *tokensDecoder) DecodeJSON(b []byte) (err error) {
	if d.std {
		d.ids, err = decodeTokensStd(b)
		return err
	}
	d.ids, err = decodeTokens(b)
	return err
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

// encode writes the body as JSON, the prompt's ids with strconv rather
// than reflection: a turn's prompt is thousands of ids, and this is the
// orchestrator's hottest encoding. The output equals json.Marshal's, and
// so does the error for a value JSON cannot carry (a NaN temperature).
func (b completionBody) encode() (json.RawMessage, error) {
	return b.encodeWith(nil)
}

// encodeWith is encode, taking the model and the prompt's first ids, already
// encoded, from pc where it holds them, and keeping this prompt's encoding
// in pc for the next request. The body is a new slice: the transport may
// still read a body after its call returned (net/http closes it in its own
// time), so the cache's memory is never handed out.
func (b completionBody) encodeWith(pc *PromptCache) (json.RawMessage, error) {
	var head []byte
	switch {
	case pc == nil || len(b.Prompt) == 0:
		head = appendPromptHead(nil, b.Model, b.Prompt)
	case pc.extends(b.Model, b.Prompt):
		head = pc.buf
		if pc.ids < len(b.Prompt) {
			head = appendInts(append(head, ','), b.Prompt[pc.ids:])
		}
	default:
		head = appendPromptHead(pc.buf[:0], b.Model, b.Prompt)
	}
	if pc != nil && len(b.Prompt) > 0 {
		pc.model, pc.ids, pc.buf = b.Model, len(b.Prompt), head
		pc.first, pc.last = b.Prompt[0], b.Prompt[len(b.Prompt)-1]
	}
	out := head
	if pc != nil {
		out = append(make([]byte, 0, len(head)+256), head...)
	}
	out = append(out, `],"max_tokens":`...)
	out = strconv.AppendInt(out, int64(b.MaxTokens), 10)
	out = append(out, `,"temperature":`...)
	var err error
	if out, err = appendJSONFloat(out, b.Temperature); err != nil {
		return nil, fmt.Errorf("temperature: %w", err)
	}
	out = append(out, `,"top_p":`...)
	if out, err = appendJSONFloat(out, b.TopP); err != nil {
		return nil, fmt.Errorf("top_p: %w", err)
	}
	out = append(out, `,"top_k":`...)
	out = strconv.AppendInt(out, int64(b.TopK), 10)
	for _, f := range [...]struct {
		key string
		v   float64
	}{{`,"min_p":`, b.MinP}, {`,"repetition_penalty":`, b.RepetitionPenalty},
		{`,"presence_penalty":`, b.PresencePenalty}, {`,"frequency_penalty":`, b.FrequencyPenalty}} {
		out = append(out, f.key...)
		if out, err = appendJSONFloat(out, f.v); err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Trim(f.key, `,":`), err)
		}
	}
	if b.Seed != nil {
		out = append(out, `,"seed":`...)
		out = strconv.AppendInt(out, *b.Seed, 10)
	}
	out = append(out, `,"n":`...)
	out = strconv.AppendInt(out, int64(b.N), 10)
	out = append(out, `,"stop":[`...)
	for i, s := range b.Stop {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, s)
	}
	out = append(out, `],"include_stop_str_in_output":`...)
	out = strconv.AppendBool(out, b.IncludeStopStrInOutput)
	out = append(out, `,"skip_special_tokens":`...)
	out = strconv.AppendBool(out, b.SkipSpecialTokens)
	out = append(out, `,"logprobs":`...)
	out = strconv.AppendInt(out, int64(b.Logprobs), 10)
	out = append(out, `,"return_tokens_as_token_ids":`...)
	out = strconv.AppendBool(out, b.ReturnTokensAsTokenIDs)
	out = append(out, '}')
	return out, nil
}

// AlreadyLoaded reports an error of LoadLoRA saying the adapter is already
// loaded, which a retried load may meet when the first attempt did take:
// vLLM answers 400 "... has already been loaded ..." (models/serving.py
// _check_load_lora_adapter_request), SGLang 400 {"success": false,
// "error_message": "Failed to load LoRA adapter N because it is already
// loaded"} (lora/lora_manager.py).
func AlreadyLoaded(err error) bool {
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
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}
