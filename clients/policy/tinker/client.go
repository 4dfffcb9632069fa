// Package tinker is the policy client of a Tinker API server's sampling
// routes (policy.server tinker): the hosted Tinker service, or one SkyRL
// server that both trains and samples. A model name the run samples from
// is a sampling session (create_sampling_session, or the one an ephemeral
// save_weights_for_sampler made); a completion is an asample future with
// the prompt as token chunks; a score is an asample with prompt_logprobs.
// Tinker has no tokenizer route: token ids come from the model's
// tokenizer in this process (policy.tokenize local). Every wire fact is in
// docs/conformance.md ("Tinker sampling") with its source.
package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
)

// IDBytes gives the exact bytes of one token id under the model's
// tokenizer (ok false for an id it does not have).
type IDBytes interface {
	TokenBytes(id int) ([]byte, bool)
}

// Options configure a Client.
type Options struct {
	// BaseModel is the base model's name (policy.model): requests for it
	// sample the base weights, unless Serve gave the name a session.
	BaseModel string
	// Tokens gives each sampled id's bytes, for Completion.Text.
	Tokens IDBytes
	// EndTokens are the texts of the model's end-of-sequence tokens
	// (Qwen2.5: "<|im_end|>" and "<|endoftext|>"), added to every
	// completion's stop strings: a Tinker server stops at no token by
	// itself (SkyRL's JAX sampler stops only where the request says, and
	// matches stop strings with special tokens kept), and stop may not
	// mix strings and token ids.
	EndTokens []string
	// MaxInFlight bounds the asample calls in flight (the SDK's default
	// dispatch limit, DefaultMaxInFlight, when zero); for
	// ThrottleFor after a 429 at most ThrottledInFlight are.
	MaxInFlight int
	// MaxBackoff bounds the total time one call waits out 429s
	// (DefaultMaxBackoff when zero; the SDK waits without a bound).
	MaxBackoff time.Duration
	// Protobuf asks for sample results as protobuf, as the SDK (0.25)
	// does (its float32 logprobs are what the server computed). Without
	// it they are asked for as JSON, which SkyRL serves to a client that
	// does not ask for protobuf; a protobuf answer is read either way.
	Protobuf bool
}

// The SDK's sampling dispatch settings (lib/internal_client_holder.py,
// sampling_client.py; SDK 0.25.0).
const (
	// DefaultMaxInFlight is the SDK's sample dispatch limit.
	DefaultMaxInFlight = 400
	// ThrottledInFlight is its limit for ThrottleFor after a 429.
	ThrottledInFlight = 10
	// ThrottleFor is how long dispatch stays throttled after a 429.
	ThrottleFor = 10 * time.Second
	// BackoffSmall and BackoffLarge are the pause every sampling call
	// waits out after a 429, for a prompt estimated up to
	// LargePromptBytes (10 bytes a token) and above.
	BackoffSmall, BackoffLarge = time.Second, 5 * time.Second
	// LargePromptBytes is the SDK's bound between the two pauses.
	LargePromptBytes = 128 << 10
	// DefaultMaxBackoff bounds one call's waiting out of 429s here.
	DefaultMaxBackoff = 10 * time.Minute
)

// Client is the policy.Policy of one Tinker server's sampling routes.
type Client struct {
	tr   *trainer.Client
	opts Options

	mu sync.Mutex
	// sess is this client's own session (for the sampling sessions it
	// makes itself), started on first need and kept alive until Close.
	sess *trainer.Session
	// served maps a model name to its sampling session.
	served map[string]string
	// seqs counts each sampling session's seq_ids.
	seqs map[string]int

	inflight  chan struct{}
	throttled chan struct{}
	// backoffUntil is the shared pause after a 429; throttleUntil the
	// end of the throttled window.
	backoffUntil, throttleUntil time.Time

	hbCtx    context.Context
	hbCancel context.CancelFunc
}

var _ policy.Policy = (*Client)(nil)

// ErrNoTokenizer is the answer of Tokenize and TokenizeChat: a Tinker
// server takes token ids and has no tokenizer route.
var ErrNoTokenizer = errors.New("a Tinker server has no tokenizer route: set policy.tokenize: local (the model's tokenizer.json in this process)")

// ErrNotServed is wrapped by a request for a model name the client has no
// sampling session for: the program's error, not a replica down (sampling
// sessions live on the server and survive its restarts).
var ErrNotServed = errors.New("not served")

// New builds the policy client of the Tinker server tr speaks to.
func New(tr *trainer.Client, o Options) (*Client, error) {
	if tr == nil {
		return nil, errors.New("tinker policy: no Tinker client")
	}
	if o.BaseModel == "" {
		return nil, errors.New("tinker policy: no base model (policy.model)")
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{tr: tr, opts: o, served: map[string]string{}, seqs: map[string]int{},
		inflight: make(chan struct{}, o.MaxInFlight), throttled: make(chan struct{}, ThrottledInFlight),
		hbCtx: ctx, hbCancel: cancel}, nil
}

// Close stops the heartbeat of the client's own session, if it started
// one.
func (c *Client) Close() {
	c.mu.Lock()
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	s.Close()
	c.hbCancel()
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tr.URL() }

// Serve makes requests for model name sample from sampling session
// sessionID (made by the trainer's ephemeral save: sync.kind tinker).
func (c *Client) Serve(name, sessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served[name] = sessionID
}

// Forget drops model name: requests for it fail until it is served again
// (a Tinker sampling session has no delete route; the server keeps it).
func (c *Client) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.served, name)
}

// Serves reports whether model name has a sampling session.
func (c *Client) Serves(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.served[name]
	return ok || name == c.opts.BaseModel
}

// session returns the client's own session, starting it on first need.
func (c *Client) session() (*trainer.Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil {
		return c.sess, nil
	}
	if c.hbCtx.Err() != nil {
		return nil, errors.New("tinker policy: client closed")
	}
	// The heartbeat outlives the call that started the session.
	s, err := c.tr.StartSession(c.hbCtx)
	if err != nil {
		return nil, err
	}
	c.sess = s
	return s, nil
}

// target returns the sampling session of model, making one over the
// base model on first use of its name.
func (c *Client) target(ctx context.Context, model string) (string, error) {
	c.mu.Lock()
	id, ok := c.served[model]
	c.mu.Unlock()
	if ok {
		return id, nil
	}
	if model != c.opts.BaseModel {
		return "", fmt.Errorf("tinker policy %s: model %q has no sampling session (not the base model %q, and no sampler weights were served under that name): %w", c.URL(), model, c.opts.BaseModel, ErrNotServed)
	}
	s, err := c.session()
	if err != nil {
		return "", err
	}
	id, err = c.tr.CreateSamplingSession(ctx, s, model, "")
	if err != nil {
		return "", fmt.Errorf("tinker policy: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.served[model]; ok {
		return prev, nil // another call made one first
	}
	c.served[model] = id
	return id, nil
}

// nextSeq returns sampling session id's next seq_id (the SDK counts them
// per sampling client from 0).
func (c *Client) nextSeq(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.seqs[id]
	c.seqs[id] = n + 1
	return n
}

// chunk is one ModelInput chunk (types/encoded_text_chunk.py).
type chunk struct {
	Tokens []int  `json:"tokens"`
	Type   string `json:"type"`
}

type modelInput struct {
	Chunks []chunk `json:"chunks"`
}

// samplingParams is the SDK's SamplingParams
// (types/_pydantic_types/sampling_params.py): every field sent, so that
// none comes from a server default (SkyRL requires max_tokens and draws
// a random seed when none is sent).
type samplingParams struct {
	MaxTokens   int      `json:"max_tokens"`
	Seed        *int64   `json:"seed,omitempty"`
	Stop        []string `json:"stop"`
	Temperature float64  `json:"temperature"`
	TopK        int      `json:"top_k"`
	TopP        float64  `json:"top_p"`
}

// sampleRequest is the SDK's SampleRequest (types/sample_request.py), in
// the form the SDK sends: addressed by sampling_session_id and seq_id.
type sampleRequest struct {
	SamplingSessionID  string         `json:"sampling_session_id"`
	SeqID              int            `json:"seq_id"`
	NumSamples         int            `json:"num_samples"`
	Prompt             modelInput     `json:"prompt"`
	SamplingParams     samplingParams `json:"sampling_params"`
	PromptLogprobs     bool           `json:"prompt_logprobs"`
	TopkPromptLogprobs int            `json:"topk_prompt_logprobs"`
	Type               string         `json:"type"`
}

// sampleResult is asample's result in JSON (SkyRL's SampleOutput,
// skyrl/tinker/types.py; the SDK's SampleResponse).
type sampleResult struct {
	Sequences      []sampledSequence `json:"sequences"`
	PromptLogprobs []*float64        `json:"prompt_logprobs"`
}

// sampledSequence is one sampled sequence of a result.
type sampledSequence struct {
	Tokens     []int      `json:"tokens"`
	Logprobs   []*float64 `json:"logprobs"`
	StopReason string     `json:"stop_reason"`
}

// unsupported names the sampling settings Tinker's SamplingParams lacks
// that s asks for: they are refused, never silently dropped.
func unsupported(s policy.Sampling) []string {
	var bad []string
	if s.MinP != 0 {
		bad = append(bad, fmt.Sprintf("min_p %g", s.MinP))
	}
	if s.RepetitionPenalty != 1 && s.RepetitionPenalty != 0 {
		bad = append(bad, fmt.Sprintf("repetition_penalty %g", s.RepetitionPenalty))
	}
	if s.PresencePenalty != 0 {
		bad = append(bad, fmt.Sprintf("presence_penalty %g", s.PresencePenalty))
	}
	if s.FrequencyPenalty != 0 {
		bad = append(bad, fmt.Sprintf("frequency_penalty %g", s.FrequencyPenalty))
	}
	return bad
}

// Unsupported returns an error naming the settings of s that a Tinker
// server cannot apply (it samples with temperature, top_k and top_p
// only), or nil.
func Unsupported(s policy.Sampling) error {
	if bad := unsupported(s); len(bad) > 0 {
		return fmt.Errorf("a Tinker server samples with temperature, top_k and top_p only; it has no %s", strings.Join(bad, ", "))
	}
	return nil
}

// Complete samples one continuation of req.Prompt from req.Model's
// sampling session: POST asample, its future polled. The stop strings are
// req.Stop and the model's end tokens; the result's ids and logprobs are
// the server's, its Text their bytes under the local tokenizer cut after
// the first stop string, as vLLM's include_stop_str_in_output text is.
func (c *Client) Complete(ctx context.Context, req policy.CompletionRequest) (*policy.Completion, error) {
	if len(req.Prompt) == 0 {
		return nil, errors.New("tinker policy complete: empty prompt")
	}
	if req.MaxTokens < 1 {
		return nil, fmt.Errorf("tinker policy complete: max_tokens %d: want at least 1 (a Tinker server requires it)", req.MaxTokens)
	}
	if err := Unsupported(req.Sampling); err != nil {
		return nil, fmt.Errorf("tinker policy complete: %w", err)
	}
	stop := make([]string, 0, len(req.Stop)+len(c.opts.EndTokens))
	stop = append(stop, req.Stop...)
	for _, e := range c.opts.EndTokens {
		if !slices.Contains(stop, e) {
			stop = append(stop, e)
		}
	}
	topK := req.TopK
	if topK <= 0 {
		topK = -1 // Tinker's "no limit"
	}
	sp := samplingParams{MaxTokens: req.MaxTokens, Seed: req.Seed, Stop: stop, Temperature: req.Temperature, TopK: topK, TopP: req.TopP}
	var res sampleResult
	if err := c.sample(ctx, req.Model, req.Prompt, sp, false, &res); err != nil {
		return nil, fmt.Errorf("tinker policy complete: %w", err)
	}
	if len(res.Sequences) == 0 {
		return nil, fmt.Errorf("tinker policy complete %s: no sequences in the result", c.URL())
	}
	seq := res.Sequences[0]
	if len(seq.Logprobs) != len(seq.Tokens) {
		return nil, fmt.Errorf("tinker policy complete %s: %d tokens and %d logprobs", c.URL(), len(seq.Tokens), len(seq.Logprobs))
	}
	out := &policy.Completion{TokenIDs: seq.Tokens, Logprobs: make([]float64, len(seq.Tokens))}
	for i, lp := range seq.Logprobs {
		if lp == nil {
			return nil, fmt.Errorf("tinker policy complete %s: no logprob for sampled token %d", c.URL(), i)
		}
		out.Logprobs[i] = *lp
	}
	if zeroFilled(out.Logprobs) {
		return nil, fmt.Errorf("tinker policy complete %s: %w", c.URL(), ErrZeroLogprobs)
	}
	switch seq.StopReason {
	case "stop", "length":
		out.FinishReason = seq.StopReason
	default:
		return nil, fmt.Errorf("tinker policy complete %s: stop_reason %q: want stop or length", c.URL(), seq.StopReason)
	}
	text, err := c.text(seq.Tokens)
	if err != nil {
		return nil, fmt.Errorf("tinker policy complete %s: %w", c.URL(), err)
	}
	out.Text = text
	if out.FinishReason == "stop" {
		if s, end := firstStop(text, req.Stop); s != "" {
			out.Text, out.StopReason = text[:end], s
		} else if n := len(seq.Tokens); n > 0 {
			id := seq.Tokens[n-1]
			out.StopTokenID = &id
		}
	}
	return out, nil
}

// ErrZeroLogprobs is a sample whose every logprob is exactly 0: SkyRL's
// FSDP backend fills zeros when its vLLM returned none
// (skyrl_train_backend.py, source audit C5), which would make every
// importance ratio exp(lp - 0) and train on nonsense.
var ErrZeroLogprobs = errors.New("every sampled logprob is exactly 0: the server filled in logprobs it did not compute (SkyRL's FSDP backend does when its vLLM returns none); check its inference engines' logprobs settings")

// zeroFilled reports whether lps are a fill of zeros rather than a
// model's logprobs: at least 4, all exactly 0 (a model's sampled token has
// probability exactly 1 only by rounding, and not four times running at
// the temperatures a run samples with).
func zeroFilled(lps []float64) bool {
	if len(lps) < 4 {
		return false
	}
	for _, lp := range lps {
		if lp != 0 {
			return false
		}
	}
	return true
}

// text is the text of ids under the local tokenizer, special tokens
// kept, ill-formed UTF-8 replaced by U+FFFD and an incomplete character at
// the end left out (as vLLM's incremental detokenizer holds it back).
func (c *Client) text(ids []int) (string, error) {
	if c.opts.Tokens == nil {
		return "", errors.New("no local tokenizer to read the sampled ids (policy.tokenizer)")
	}
	var b []byte
	for _, id := range ids {
		p, ok := c.opts.Tokens.TokenBytes(id)
		if !ok {
			return "", fmt.Errorf("sampled token id %d is not in the local tokenizer (policy.tokenizer is not this model's?)", id)
		}
		b = append(b, p...)
	}
	// Drop an incomplete character at the end (at most 3 bytes).
	for k := 1; k <= 3 && k <= len(b); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if r, _ := utf8.DecodeRune(b[len(b)-k:]); r == utf8.RuneError && !utf8.FullRune(b[len(b)-k:]) {
				b = b[:len(b)-k]
			}
			break
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}

// firstStop returns the stop string of stops that ends first in text and
// where it ends ("" when none occurs).
func firstStop(text string, stops []string) (string, int) {
	best, end := "", math.MaxInt
	for _, s := range stops {
		if s == "" {
			continue
		}
		if i := strings.Index(text, s); i >= 0 && i+len(s) < end {
			best, end = s, i+len(s)
		}
	}
	return best, end
}

// Score returns the logprob of every token of seq given the tokens before
// it under model: an asample of one token with prompt_logprobs. Entry 0
// is 0. A server that reports one entry per prompt token (its first
// null: the SDK's and SkyRL's vLLM paths) and one that leaves the first
// out (SkyRL's JAX backend, prompt length - 1 entries) are both read.
func (c *Client) Score(ctx context.Context, model string, seq []int) ([]float64, error) {
	if len(seq) == 0 {
		return nil, errors.New("tinker policy score: empty sequence")
	}
	seed := int64(0)
	sp := samplingParams{MaxTokens: 1, Seed: &seed, Stop: []string{}, Temperature: 1, TopK: -1, TopP: 1}
	var res sampleResult
	if err := c.sample(ctx, model, seq, sp, true, &res); err != nil {
		return nil, fmt.Errorf("tinker policy score: %w", err)
	}
	lps := res.PromptLogprobs
	switch len(lps) {
	case len(seq):
		lps = lps[1:]
	case len(seq) - 1:
	default:
		return nil, fmt.Errorf("tinker policy score %s: %d prompt logprobs for %d tokens (want %d, or %d without the first)", c.URL(), len(lps), len(seq), len(seq), len(seq)-1)
	}
	out := make([]float64, len(seq))
	for i, lp := range lps {
		if lp == nil {
			return nil, fmt.Errorf("tinker policy score %s: no prompt logprob for token %d", c.URL(), i+1)
		}
		out[i+1] = *lp
	}
	return out, nil
}

// sample sends one asample for model and resolves it into out: the SDK's
// dispatch (a bounded number in flight, fewer for a while after a 429;
// every call waits out the shared pause a 429 starts, then sends again
// with the same seq_id). asample changes no model state, so sending it
// again is safe: SkyRL makes a new future for each (api.py asample), and
// with a seed the same sample comes back. An expired future (410) is
// sent again with a new seq_id, as the SDK's retry handler does.
func (c *Client) sample(ctx context.Context, model string, prompt []int, sp samplingParams, promptLogprobs bool, out *sampleResult) error {
	id, err := c.target(ctx, model)
	if err != nil {
		return err
	}
	release, err := c.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	body := &sampleRequest{SamplingSessionID: id, SeqID: c.nextSeq(id), NumSamples: 1,
		Prompt: modelInput{Chunks: []chunk{{Tokens: prompt, Type: "encoded_text"}}}, SamplingParams: sp,
		PromptLogprobs: promptLogprobs, Type: "sample"}
	call := transport.Call{Retry: transport.RetryBackpressure, Headers: map[string]string{"X-Tinker-Sampling-Backpressure": "1"}}
	waited := time.Duration(0)
	for expired := 0; ; {
		if err := c.waitBackoff(ctx); err != nil {
			return err
		}
		reqID, err := c.tr.Submit(ctx, "asample", body, call)
		if transport.IsStatus(err, http.StatusTooManyRequests) {
			pause := BackoffSmall
			if len(prompt)*10 > LargePromptBytes {
				pause = BackoffLarge
			}
			if waited += pause; waited > c.opts.MaxBackoff {
				return fmt.Errorf("%w (still refused after %s of backing off)", err, c.opts.MaxBackoff)
			}
			c.backOff(pause)
			continue
		}
		if err != nil {
			return err
		}
		var headers map[string]string
		if c.opts.Protobuf {
			headers = map[string]string{"Accept": ProtobufAccept}
		}
		raw, err := c.tr.ResolveBinary(ctx, "asample", reqID, headers, checkSampleResponse)
		if errors.Is(err, trainer.ErrExpired) && expired < 3 {
			expired++
			body.SeqID = c.nextSeq(id)
			continue
		}
		if err != nil {
			return err
		}
		if json.Valid(raw) {
			if err := json.Unmarshal(raw, out); err != nil {
				return fmt.Errorf("asample %s: decode result: %w", c.URL(), err)
			}
			return nil
		}
		return decodeSampleResponse(raw, out)
	}
}

// acquire takes a dispatch slot (and, in a throttled window, one of the
// few throttled ones).
func (c *Client) acquire(ctx context.Context) (func(), error) {
	select {
	case c.inflight <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	throttled := time.Now().Before(c.throttleUntil)
	c.mu.Unlock()
	if !throttled {
		return func() { <-c.inflight }, nil
	}
	select {
	case c.throttled <- struct{}{}:
	case <-ctx.Done():
		<-c.inflight
		return nil, ctx.Err()
	}
	return func() { <-c.throttled; <-c.inflight }, nil
}

// backOff starts (or extends) the shared pause after a 429.
func (c *Client) backOff(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if until := now.Add(d); until.After(c.backoffUntil) {
		c.backoffUntil = until
	}
	c.throttleUntil = now.Add(ThrottleFor)
}

// waitBackoff waits out the shared pause, if one is running.
func (c *Client) waitBackoff(ctx context.Context) error {
	c.mu.Lock()
	d := time.Until(c.backoffUntil)
	c.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Tokenize is refused: see ErrNoTokenizer.
func (c *Client) Tokenize(context.Context, string, string, bool) ([]int, error) {
	return nil, ErrNoTokenizer
}

// TokenizeChat is refused: see ErrNoTokenizer.
func (c *Client) TokenizeChat(context.Context, string, []policy.Message, bool) ([]int, error) {
	return nil, ErrNoTokenizer
}

// LoadLoRA serves the sampler weights at path, a tinker:// path the
// trainer gave (tinker://<model_id>/sampler_weights/<name>), under name:
// a sampling session is made over them (create_sampling_session with
// model_path). A directory on disk is refused: a Tinker server samples
// only weights it saved.
func (c *Client) LoadLoRA(ctx context.Context, name, path string) error {
	if !strings.HasPrefix(path, "tinker://") {
		return fmt.Errorf("tinker policy %s: cannot serve %s: a Tinker server samples weights it saved, named by a tinker:// path, not a directory", c.URL(), path)
	}
	c.mu.Lock()
	_, dup := c.served[name]
	c.mu.Unlock()
	if dup {
		return fmt.Errorf("tinker policy %s: %s is served already: %w", c.URL(), name, policy.ErrAlreadyLoaded)
	}
	s, err := c.session()
	if err != nil {
		return err
	}
	id, err := c.tr.CreateSamplingSession(ctx, s, "", path)
	if err != nil {
		return fmt.Errorf("tinker policy: %w", err)
	}
	c.Serve(name, id)
	return nil
}

// UnloadLoRA forgets name (see Forget); a name not served is refused.
func (c *Client) UnloadLoRA(_ context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.served[name]; !ok {
		return fmt.Errorf("tinker policy %s: %s is not served", c.URL(), name)
	}
	delete(c.served, name)
	return nil
}

// UpdateWeightsFromDisk is refused: a Tinker server samples the weights
// its trainer saved (sync.kind tinker), not a directory.
func (c *Client) UpdateWeightsFromDisk(_ context.Context, path string) error {
	return fmt.Errorf("tinker policy %s: cannot load %s from disk: a Tinker server samples the weights its trainer saved (sync.kind tinker): %w", c.URL(), path, policy.ErrWeightsFromDiskUnsupported)
}

// Health returns nil when GET /api/v1/healthz answers 2xx.
func (c *Client) Health(ctx context.Context) error {
	return c.tr.Healthz(ctx)
}

// Models lists the base models the server samples
// (get_server_capabilities) and the names this client serves.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	caps, err := c.tr.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.served {
		if !slices.Contains(caps, n) {
			caps = append(caps, n)
		}
	}
	slices.Sort(caps)
	return caps, nil
}
