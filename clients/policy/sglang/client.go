// Package sglang is the policy client of an SGLang server spoken through
// its native routes (POST /generate, /get_model_info, /load_lora_adapter,
// ...), not its OpenAI-compatible ones: SGLang's /v1/completions has no
// token-id logprobs, no prompt logprobs and trims stop strings
// (PROTOCOLS.md §6). Token ids go in and come back out.
package sglang

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/transport"
)

// Client is the policy.Policy of one SGLang server. Requests that name the
// base model go without a LoRA adapter; any other model name is sent as
// lora_path, the name of an adapter loaded with LoadLoRA.
type Client struct {
	tc   *transport.Client
	base string
}

var _ policy.Policy = (*Client)(nil)

// ErrNoChatTemplate is returned by TokenizeChat: SGLang's /tokenize takes
// no messages, so the chat prompt must be tokenized in this process.
var ErrNoChatTemplate = errors.New("sglang's /tokenize applies no chat template: set policy.tokenize: local")

// New builds the client of the SGLang server described by opts (opts.Role
// defaults to "policy"); base is the base model name (policy.model).
func New(opts transport.Options, base string) (*Client, error) {
	if opts.Role == "" {
		opts.Role = "policy"
	}
	tc, err := transport.New(opts)
	if err != nil {
		return nil, err
	}
	return &Client{tc: tc, base: base}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Close closes idle connections.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the server.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.tc.Do(ctx, method, path, in, out)
}

// samplingParams is SGLang's sampling_params (sampling/sampling_params.py
// SamplingParams). Every field whose default differs from what the program
// means is sent: max_new_tokens (default 128), top_k (-1: whole
// vocabulary), skip_special_tokens (default true), no_stop_trim (default
// false: the stop string would be cut from text). sampling_seed exists only
// in newer versions (older ones reject it), so it is sent only with a seed.
type samplingParams struct {
	MaxNewTokens      int      `json:"max_new_tokens"`
	Temperature       float64  `json:"temperature"`
	TopP              float64  `json:"top_p"`
	TopK              int      `json:"top_k"`
	MinP              float64  `json:"min_p"`
	RepetitionPenalty float64  `json:"repetition_penalty"`
	PresencePenalty   float64  `json:"presence_penalty"`
	FrequencyPenalty  float64  `json:"frequency_penalty"`
	Stop              []string `json:"stop"`
	NoStopTrim        bool     `json:"no_stop_trim"`
	SkipSpecialTokens bool     `json:"skip_special_tokens"`
	SamplingSeed      *int64   `json:"sampling_seed,omitempty"`
}

// generateBody is SGLang's GenerateReqInput (managers/io_struct.py), one
// prompt of token ids. lora_path null means the base model.
type generateBody struct {
	InputIDs        []int          `json:"input_ids"`
	SamplingParams  samplingParams `json:"sampling_params"`
	ReturnLogprob   bool           `json:"return_logprob"`
	LogprobStartLen int            `json:"logprob_start_len"`
	TopLogprobsNum  int            `json:"top_logprobs_num"`
	ReturnText      bool           `json:"return_text_in_logprobs"`
	Stream          bool           `json:"stream"`
	LoRAPath        *string        `json:"lora_path"`
}

func (c *Client) loraPath(model string) *string {
	if model == "" || model == c.base {
		return nil
	}
	return &model
}

func params(maxNew int, s policy.Sampling, stop []string, seed *int64) samplingParams {
	if stop == nil {
		stop = []string{}
	}
	return samplingParams{
		MaxNewTokens: maxNew, Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, MinP: s.MinP,
		RepetitionPenalty: s.RepetitionPenalty, PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty,
		Stop: stop, NoStopTrim: true, SkipSpecialTokens: false, SamplingSeed: seed,
	}
}

// Complete samples one continuation of req.Prompt (POST /generate with
// input_ids, every sampling field sent, no_stop_trim true so the text keeps
// the stop string, return_logprob true, logprob_start_len -1) and returns
// output_ids with meta_info.output_token_logprobs and finish_reason.
func (c *Client) Complete(ctx context.Context, req policy.CompletionRequest) (*policy.Completion, error) {
	if len(req.Prompt) == 0 {
		return nil, errors.New("policy complete: empty prompt")
	}
	body := generateBody{
		InputIDs:       req.Prompt,
		SamplingParams: params(req.MaxTokens, req.Sampling, req.Stop, req.Seed),
		ReturnLogprob:  true, LogprobStartLen: -1,
		LoRAPath: c.loraPath(req.Model),
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodPost, "/generate", body, &raw); err != nil {
		return nil, fmt.Errorf("policy complete: %w", err)
	}
	out, err := DecodeGenerate(raw)
	if err != nil {
		return nil, fmt.Errorf("policy complete %s: %w", c.URL(), err)
	}
	return out, nil
}

type generateAnswer struct {
	Text      *string           `json:"text"`
	OutputIDs []int             `json:"output_ids"`
	Meta      *generateMetaInfo `json:"meta_info"`
}

type generateMetaInfo struct {
	FinishReason        json.RawMessage     `json:"finish_reason"`
	OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
	InputTokenLogprobs  [][]json.RawMessage `json:"input_token_logprobs"`
}

// logprobEntry reads one [logprob, id, text] triple; a null logprob is
// reported as ok false.
func logprobEntry(e []json.RawMessage) (lp float64, id int, ok bool, err error) {
	if len(e) < 2 {
		return 0, 0, false, fmt.Errorf("entry %s is not [logprob, id, text]", joinRaw(e))
	}
	if err := json.Unmarshal(e[1], &id); err != nil {
		return 0, 0, false, fmt.Errorf("entry %s: token id: %w", joinRaw(e), err)
	}
	var p *float64
	if err := json.Unmarshal(e[0], &p); err != nil {
		return 0, 0, false, fmt.Errorf("entry %s: logprob: %w", joinRaw(e), err)
	}
	if p == nil {
		return 0, id, false, nil
	}
	return *p, id, true, nil
}

func joinRaw(e []json.RawMessage) string {
	parts := make([]string, len(e))
	for i, r := range e {
		parts[i] = string(r)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// DecodeGenerate reads SGLang's /generate answer to a sampling request:
// text, output_ids (which must equal the ids of
// meta_info.output_token_logprobs, one logprob each, none null) and
// meta_info.finish_reason ({"type": "stop", "matched": string or token id}
// or {"type": "length", ...}; another type, such as "abort", is an error).
func DecodeGenerate(raw []byte) (*policy.Completion, error) {
	var a generateAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("decode answer: %w", err)
	}
	if a.Meta == nil {
		return nil, errors.New("no meta_info in answer")
	}
	lps := a.Meta.OutputTokenLogprobs
	if lps == nil {
		return nil, errors.New("no meta_info.output_token_logprobs in answer (return_logprob ignored?)")
	}
	if a.OutputIDs == nil {
		return nil, errors.New("no output_ids in answer")
	}
	if len(lps) != len(a.OutputIDs) {
		return nil, fmt.Errorf("%d output logprobs for %d output ids", len(lps), len(a.OutputIDs))
	}
	out := &policy.Completion{TokenIDs: a.OutputIDs, Logprobs: make([]float64, len(lps))}
	for i, e := range lps {
		lp, id, ok, err := logprobEntry(e)
		if err != nil {
			return nil, fmt.Errorf("output token %d: %w", i, err)
		}
		if !ok {
			return nil, fmt.Errorf("output token %d: null logprob", i)
		}
		if id != a.OutputIDs[i] {
			return nil, fmt.Errorf("output token %d: logprob is for id %d, output_ids has %d", i, id, a.OutputIDs[i])
		}
		out.Logprobs[i] = lp
	}
	if a.Text != nil {
		out.Text = *a.Text
	}
	if err := finishReason(a.Meta.FinishReason, out); err != nil {
		return nil, err
	}
	return out, nil
}

func finishReason(raw json.RawMessage, out *policy.Completion) error {
	var fr *struct {
		Type    string          `json:"type"`
		Matched json.RawMessage `json:"matched"`
		Message string          `json:"message"`
	}
	if err := json.Unmarshal(raw, &fr); err != nil || fr == nil {
		return fmt.Errorf("meta_info.finish_reason %s: not an object", clip(string(raw)))
	}
	switch fr.Type {
	case "length":
		out.FinishReason = "length"
		return nil
	case "stop":
		out.FinishReason = "stop"
	default:
		return fmt.Errorf("meta_info.finish_reason type %q %s", fr.Type, fr.Message)
	}
	m := strings.TrimSpace(string(fr.Matched))
	switch {
	case m == "" || m == "null":
	case m[0] == '"':
		if err := json.Unmarshal(fr.Matched, &out.StopReason); err != nil {
			return fmt.Errorf("meta_info.finish_reason.matched: %w", err)
		}
	default:
		var id int
		if err := json.Unmarshal(fr.Matched, &id); err != nil {
			return fmt.Errorf("meta_info.finish_reason.matched %s: neither string, integer nor null", clip(m))
		}
		out.StopTokenID = &id
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Score returns the logprob of every token of seq given the ones before it
// under model (POST /generate with input_ids seq, max_new_tokens 1, greedy
// unpenalised sampling, return_logprob true, logprob_start_len 0), read
// from meta_info.input_token_logprobs: len(seq) entries whose ids must be
// seq's; entry 0 has no logprob (null) and is 0.
func (c *Client) Score(ctx context.Context, model string, seq []int) ([]float64, error) {
	if len(seq) == 0 {
		return nil, errors.New("policy score: empty sequence")
	}
	body := generateBody{
		InputIDs:       seq,
		SamplingParams: params(1, policy.Greedy(), nil, nil),
		ReturnLogprob:  true, LogprobStartLen: 0,
		LoRAPath: c.loraPath(model),
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodPost, "/generate", body, &raw); err != nil {
		return nil, fmt.Errorf("policy score: %w", err)
	}
	out, err := DecodeScore(raw, seq)
	if err != nil {
		return nil, fmt.Errorf("policy score %s: %w", c.URL(), err)
	}
	return out, nil
}

// DecodeScore reads meta_info.input_token_logprobs of SGLang's /generate
// answer to a scoring request for seq (see Score).
func DecodeScore(raw []byte, seq []int) ([]float64, error) {
	var a generateAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("decode answer: %w", err)
	}
	if a.Meta == nil || a.Meta.InputTokenLogprobs == nil {
		return nil, errors.New("no meta_info.input_token_logprobs in answer (logprob_start_len ignored?)")
	}
	in := a.Meta.InputTokenLogprobs
	if len(in) != len(seq) {
		return nil, fmt.Errorf("%d input logprobs for %d tokens", len(in), len(seq))
	}
	out := make([]float64, len(seq))
	for i, e := range in {
		lp, id, ok, err := logprobEntry(e)
		if err != nil {
			return nil, fmt.Errorf("input token %d: %w", i, err)
		}
		if id != seq[i] {
			return nil, fmt.Errorf("input token %d: logprob is for id %d, the sequence has %d", i, id, seq[i])
		}
		if i == 0 {
			continue
		}
		if !ok || math.IsNaN(lp) {
			return nil, fmt.Errorf("input token %d: no logprob", i)
		}
		out[i] = lp
	}
	return out, nil
}

// Tokenize tokenizes plain text with SGLang's POST /tokenize ({"model",
// "prompt", "add_special_tokens"} -> {"tokens": [...]}).
func (c *Client) Tokenize(ctx context.Context, model, text string, addSpecialTokens bool) ([]int, error) {
	var resp struct {
		Tokens []int `json:"tokens"`
	}
	body := map[string]any{"model": model, "prompt": text, "add_special_tokens": addSpecialTokens}
	if err := c.do(ctx, http.MethodPost, "/tokenize", body, &resp); err != nil {
		return nil, fmt.Errorf("policy tokenize: %w", err)
	}
	if resp.Tokens == nil {
		return nil, fmt.Errorf("policy tokenize %s: no tokens in answer", c.URL())
	}
	return resp.Tokens, nil
}

// TokenizeChat always fails with ErrNoChatTemplate.
func (c *Client) TokenizeChat(context.Context, string, []policy.Message, bool) ([]int, error) {
	return nil, fmt.Errorf("policy tokenize chat %s: %w", c.URL(), ErrNoChatTemplate)
}

// ErrLoRADisabled is wrapped by LoadLoRA and UnloadLoRA errors when the
// server has no LoRA routes or refuses them for want of LoRA support.
var ErrLoRADisabled = errors.New("lora is disabled: start SGLang with --enable-lora --max-loras-per-batch N (and --max-lora-rank, --lora-target-modules, or --lora-paths for the adapter's shape)")

// routeMissing reports whether err is a 404 or 405 of a missing route.
func routeMissing(err error) bool {
	var se *transport.StatusError
	return errors.As(err, &se) && (se.Status == http.StatusNotFound || se.Status == http.StatusMethodNotAllowed)
}

// loraAnswer is SGLang's LoadLoRAAdapterReqOutput (success, error_message).
type loraAnswer struct {
	Success      *bool  `json:"success"`
	ErrorMessage string `json:"error_message"`
}

func (c *Client) lora(ctx context.Context, what, path, name string, body any) error {
	var ans loraAnswer
	err := c.do(ctx, http.MethodPost, path, body, &ans)
	if err != nil {
		if routeMissing(err) {
			return fmt.Errorf("policy %s %q at %s: %w", what, name, c.URL(), ErrLoRADisabled)
		}
		var se *transport.StatusError
		if errors.As(err, &se) && se.Status == http.StatusBadRequest {
			var a loraAnswer
			msg := strings.TrimSpace(se.Body)
			if json.Unmarshal([]byte(se.Body), &a) == nil && a.ErrorMessage != "" {
				msg = a.ErrorMessage
			}
			if strings.Contains(strings.ToLower(msg), "enable-lora") || strings.Contains(strings.ToLower(msg), "enable_lora") {
				return fmt.Errorf("policy %s %q at %s: %s: %w", what, name, c.URL(), msg, ErrLoRADisabled)
			}
			return &refused{msg: fmt.Sprintf("policy %s %q at %s: refused: %s", what, name, c.URL(), msg), err: err}
		}
		return fmt.Errorf("policy %s %q: %w", what, name, err)
	}
	if ans.Success != nil && !*ans.Success {
		return fmt.Errorf("policy %s %q at %s: refused: %s", what, name, c.URL(), ans.ErrorMessage)
	}
	return nil
}

// refused is a server's refusal, shown by its message, that still unwraps
// to the transport.StatusError (its status tells callers what kind).
type refused struct {
	msg string
	err error
}

func (e *refused) Error() string { return e.msg }
func (e *refused) Unwrap() error { return e.err }

// LoadLoRA loads the PEFT adapter in directory path as name (POST
// /load_lora_adapter {"lora_name", "lora_path", "pinned": false}); a
// refusal is an error with SGLang's error_message.
func (c *Client) LoadLoRA(ctx context.Context, name, path string) error {
	return c.lora(ctx, "load lora", "/load_lora_adapter", name,
		map[string]any{"lora_name": name, "lora_path": path, "pinned": false})
}

// UnloadLoRA unloads adapter name (POST /unload_lora_adapter
// {"lora_name"}).
func (c *Client) UnloadLoRA(ctx context.Context, name string) error {
	return c.lora(ctx, "unload lora", "/unload_lora_adapter", name, map[string]any{"lora_name": name})
}

// UpdateWeightsFromDisk loads the full model at path in place of the served
// weights, exactly as clients/policy does (policy.UpdateWeightsFromDiskWith
// over this client's call path).
func (c *Client) UpdateWeightsFromDisk(ctx context.Context, path string) error {
	return policy.UpdateWeightsFromDiskWith(ctx, c.do, c.URL(), path)
}

// Health returns nil when GET /health answers 200 (SGLang answers 503
// while its scheduler does not respond).
func (c *Client) Health(ctx context.Context) error {
	if err := c.do(ctx, http.MethodGet, "/health", nil, nil); err != nil {
		return fmt.Errorf("policy health: %w", err)
	}
	return nil
}

// Models lists what the server serves: GET /get_model_info's model_path,
// then GET /v1/models's ids (served_model_name and, in versions that list
// them, the loaded LoRA adapters), without repeats.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	var info struct {
		ModelPath string `json:"model_path"`
	}
	if err := c.do(ctx, http.MethodGet, "/get_model_info", nil, &info); err != nil {
		return nil, fmt.Errorf("policy models: %w", err)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/models", nil, &list); err != nil {
		return nil, fmt.Errorf("policy models: %w", err)
	}
	var ids []string
	if info.ModelPath != "" {
		ids = append(ids, info.ModelPath)
	}
	for _, d := range list.Data {
		if d.ID != "" && !slices.Contains(ids, d.ID) {
			ids = append(ids, d.ID)
		}
	}
	return ids, nil
}

// ServerInfo is what GET /get_server_info says of a server: its server
// arguments at the top level (dataclasses.asdict(server_args)), then
// "version" (entrypoints/http_server.py server_info).
type ServerInfo struct {
	// Version is SGLang's version string ("" when the answer has none).
	Version string
	// ModelPath is server_args.model_path, the path of the last successful
	// /update_weights_from_disk once there was one.
	ModelPath string
	// DeterministicInference is server_args.enable_deterministic_inference
	// (nil in versions without the flag): without it sampling_seed is
	// ignored.
	DeterministicInference *bool
}

// ServerInfo reads GET /get_server_info.
func (c *Client) ServerInfo(ctx context.Context) (ServerInfo, error) {
	var a struct {
		Version                      string `json:"version"`
		ModelPath                    string `json:"model_path"`
		EnableDeterministicInference *bool  `json:"enable_deterministic_inference"`
	}
	if err := c.do(ctx, http.MethodGet, "/get_server_info", nil, &a); err != nil {
		return ServerInfo{}, fmt.Errorf("policy server info: %w", err)
	}
	return ServerInfo{Version: a.Version, ModelPath: a.ModelPath, DeterministicInference: a.EnableDeterministicInference}, nil
}

// Version is an SGLang release number: major, minor, patch.
type Version [3]int

// ParseVersion reads the release number at the start of an SGLang version
// string ("0.5.2", "0.5.3.post2", "0.5.6rc1"); ok is false when there is
// none (a development build, the simulator's "hindsearch-simulator").
func ParseVersion(s string) (v Version, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(s, "v"), ".", 4)
	if len(parts) < 2 {
		return v, false
	}
	for i := 0; i < 3 && i < len(parts); i++ {
		n, digits := 0, 0
		for _, r := range parts[i] {
			if r < '0' || r > '9' {
				break
			}
			n, digits = n*10+int(r-'0'), digits+1
		}
		if digits == 0 {
			if i < 2 {
				return Version{}, false
			}
			break
		}
		v[i] = n
	}
	return v, true
}

// Before reports whether v is an older release than w.
func (v Version) Before(w Version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// MinSamplingSeed is the first release whose SamplingParams takes
// sampling_seed (upstream commit e2ac7888, PR #10678, released in 0.5.3):
// an older one answers a request carrying it with a plain 500.
var MinSamplingSeed = Version{0, 5, 3}
