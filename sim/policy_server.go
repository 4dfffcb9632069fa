package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// PolicyServer is the simulated policy: a vLLM-compatible HTTP server
// (PROTOCOLS.md §2) over lm.Model. The base model serves
// lm.InitialParams; LoRA adapters saved by the simulated trainer are loaded
// at run time through /v1/load_lora_adapter and served under their names,
// and SGLang's /update_weights_from_disk replaces the base model's
// parameters in place (see policy_weights.go).
type PolicyServer struct {
	model     *lm.Model
	baseModel string
	mu        sync.RWMutex
	adapters  map[string]lm.Params
	paths     map[string]string // adapter name -> the lora_path it was loaded from
	order     []string
	// weightsPath is the model_path of the last full-weight reload.
	weightsPath string
	running     atomic.Int64
	requests    atomic.Int64
	tokens      atomic.Int64
	// promptTokens and cachedTokens count the prompt tokens of requests
	// that went through the engine, and those of them served from the
	// prefix cache.
	promptTokens, cachedTokens atomic.Int64
	lat                        Latency
	eng                        *engine      // nil: no policy latency, requests bypass the engine
	cache                      *prefixCache // nil: no prefix caching
	gen                        lm.GenerationConfig
	// ignored counts the request fields accepted and ignored, as vLLM
	// and SGLang ignore fields their request models lack.
	ignored ignoredFields
	// originalLogprob: /generate reports raw logprobs (SGLang's
	// SGLANG_RETURN_ORIGINAL_LOGPROB), else temperature-scaled ones.
	originalLogprob bool
	// loraCache is SGLang's lora_ref_cache: every adapter name loaded
	// through /load_lora_adapter, with its path, in loraCacheOrder.
	loraCache      map[string]string
	loraCacheOrder []string
	// sglang is the simulated SGLang's version and server arguments (see
	// SGLangOptions).
	sglang SGLangOptions
	// prefillNoise is the sd of the prefill route's logprob noise
	// (SetPrefillNoise).
	prefillNoise float64
	// reqLog, when set (SetRequestLog), gets one JSON line per
	// completion request; reqLogMu orders its writes.
	reqLog   io.Writer
	reqLogMu sync.Mutex
}

// SetRequestLog makes the server write one JSON line per /v1/completions
// request to w: {"session": its X-Session-ID header ("" without), "model",
// "prompt_tokens"}, so that which replica served which session (a router
// in front) can be read afterwards. Call it before serving.
func (s *PolicyServer) SetRequestLog(w io.Writer) { s.reqLog = w }

// logRequest writes a request's line to the request log, if any.
func (s *PolicyServer) logRequest(r *http.Request, model string, promptTokens int) {
	if s.reqLog == nil {
		return
	}
	b, _ := json.Marshal(struct {
		Session      string `json:"session"`
		Model        string `json:"model"`
		PromptTokens int    `json:"prompt_tokens"`
	}{r.Header.Get("X-Session-ID"), model, promptTokens})
	s.reqLogMu.Lock()
	defer s.reqLogMu.Unlock()
	_, _ = s.reqLog.Write(append(b, '\n'))
}

// NewPolicyServer returns a simulated policy serving baseModel, whose
// generation config is lm.QwenInstructGenerationConfig's.
func NewPolicyServer(model *lm.Model, baseModel string) *PolicyServer {
	return &PolicyServer{model: model, baseModel: baseModel, adapters: map[string]lm.Params{baseModel: lm.InitialParams()}, paths: map[string]string{},
		gen: lm.QwenInstructGenerationConfig()}
}

// SetGenerationConfig sets the generation config the served model ships
// (its adapters share it, as in vLLM): a completion request's omitted
// sampling fields take its values. Call it before the server takes
// requests.
func (s *PolicyServer) SetGenerationConfig(gc lm.GenerationConfig) { s.gen = gc }

// SetLatency sets the replica's simulated GPU timing (see Latency); with
// any policy timing set, completion requests go through a continuous-batching
// engine whose goroutine runs until Close. Call it before the server takes
// requests.
func (s *PolicyServer) SetLatency(l Latency) {
	if s.eng != nil {
		s.eng.close()
		s.eng = nil
	}
	s.lat = l
	s.cache = nil
	if l.PrefixCaching {
		s.cache = newPrefixCache(1 << 20)
	}
	if l.engineOn() {
		s.eng = newEngine(l)
	}
}

// prefill is how many of prompt's tokens the engine prefills: with prefix
// caching only those past its cached blocks, and what the request
// processes (prompt, then generated) is cached for the next (the agent's
// next turn extends this one's prompt and output). It counts the prompt
// and cached tokens for Stats.
func (s *PolicyServer) prefill(prompt, generated []int) int {
	s.promptTokens.Add(int64(len(prompt)))
	if s.cache == nil {
		return len(prompt)
	}
	hit := s.cache.cached(prompt)
	s.cachedTokens.Add(int64(hit))
	seq := prompt
	if len(generated) > 0 {
		seq = append(append(make([]int, 0, len(prompt)+len(generated)), prompt...), generated...)
	}
	s.cache.insert(seq)
	return len(prompt) - hit
}

// Close stops the engine goroutine (if any); requests still waiting in it
// are answered 503. Close the HTTP server too: Close does not. Calling it
// again is harmless.
func (s *PolicyServer) Close() {
	if s.eng != nil {
		s.eng.close()
	}
}

// Stats returns the replica's scheduling counters.
func (s *PolicyServer) Stats() PolicyStats {
	st := PolicyStats{Requests: s.requests.Load(), PromptTokens: s.promptTokens.Load(), CachedTokens: s.cachedTokens.Load()}
	if s.eng == nil {
		st.Running = int(s.running.Load())
		st.Tokens = s.tokens.Load()
		return st
	}
	var busy time.Duration
	st.Running, st.Waiting, st.DecodeSteps, st.Tokens, busy = s.eng.stats()
	st.BusySeconds = busy.Seconds()
	return st
}

// Handler returns the server's HTTP routes.
func (s *PolicyServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("POST /detokenize", s.detokenize)
	mux.HandleFunc("POST /v1/load_lora_adapter", s.loadLoRA)
	mux.HandleFunc("POST /v1/unload_lora_adapter", s.unloadLoRA)
	mux.HandleFunc("POST /update_weights_from_disk", s.updateWeightsFromDisk)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /metrics", s.metrics)
	s.sglangRoutes(mux)
	return httpx.Labelled(mux)
}

// Params returns a copy of the parameters served under name.
func (s *PolicyServer) Params(name string) (lm.Params, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.adapters[name]
	return append(lm.Params(nil), p...), ok
}

// IgnoredFields returns, for every "ROUTE FIELD" that requests carried and
// the server ignored (a field vLLM's or SGLang's request model lacks), the
// number of requests that carried it. A client that sends only fields the
// servers read leaves it empty.
func (s *PolicyServer) IgnoredFields() map[string]int { return s.ignored.Snapshot() }

func (s *PolicyServer) params(name string) (lm.Params, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.adapters[name]
	return p, ok
}

// intList accepts a JSON list of token ids or a string prompt.
type promptField struct {
	ids  []int
	text *string
}

func (p *promptField) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		p.text = &s
		return nil
	}
	if ids, ok := scanIDs(b, p.ids[:0]); ok {
		p.ids = ids
		return nil
	}
	return json.Unmarshal(b, &p.ids)
}

// scanIDs reads a JSON array of plain decimal integers (at most 18 digits,
// no fraction or exponent) as encoding/json reads it into an []int,
// appending to dst: the token-id prompt of every completion request, a
// thousand numbers that encoding/json would read by reflection. ok is
// false for anything else, left to encoding/json (the fuzz test holds
// the two to the same ids).
func scanIDs(b []byte, dst []int) ([]int, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		if dst == nil {
			dst = []int{} // as encoding/json: empty, not nil
		}
		return dst, skipWS(b, i+1) == len(b)
	}
	if dst == nil {
		dst = make([]int, 0, len(b)/4)
	}
	for {
		neg := i < len(b) && b[i] == '-'
		if neg {
			i++
		}
		start, v := i, 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + int(b[i]-'0')
			i++
		}
		n := i - start
		if n == 0 || n > 18 || n > 1 && b[start] == '0' {
			return nil, false
		}
		if neg {
			v = -v
		}
		dst = append(dst, v)
		i = skipWS(b, i)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return dst, skipWS(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// skipWS returns the index of the first byte at or after i that is not
// JSON white space.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

type stopField []string

func (s *stopField) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = []string{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(s))
}

type completionRequest struct {
	Model     string      `json:"model"`
	Prompt    promptField `json:"prompt"`
	MaxTokens *int        `json:"max_tokens"`
	lm.SamplingFields
	Seed                   *int64    `json:"seed"`
	N                      *int      `json:"n"`
	Stop                   stopField `json:"stop"`
	IncludeStopStrInOutput bool      `json:"include_stop_str_in_output"`
	SkipSpecialTokens      *bool     `json:"skip_special_tokens"`
	Logprobs               *int      `json:"logprobs"`
	PromptLogprobs         *int      `json:"prompt_logprobs"`
	ReturnTokensAsTokenIDs bool      `json:"return_tokens_as_token_ids"`
	ReturnTokenIDs         bool      `json:"return_token_ids"`
	Echo                   bool      `json:"echo"`
}

type promptLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

func (s *PolicyServer) completions(w http.ResponseWriter, r *http.Request) {
	s.running.Add(1)
	s.requests.Add(1)
	defer s.running.Add(-1)
	var req completionRequest
	err := s.ignored.Decode(w, r, "POST /v1/completions", &req)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	params, ok := s.params(req.Model)
	if !ok {
		openAIError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	tk := s.model.Tokenizer()
	prompt := req.Prompt.ids
	if req.Prompt.text != nil {
		prompt = tk.Encode(*req.Prompt.text)
	}
	if len(prompt) == 0 {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "prompt must not be empty")
		return
	}
	s.logRequest(r, req.Model, len(prompt))
	for _, id := range prompt {
		if id < 0 || id >= tk.VocabSize() {
			openAIError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("token id %d out of vocabulary (size %d)", id, tk.VocabSize()))
			return
		}
	}
	// Omitted sampling fields come from the model's generation config
	// (then vLLM's defaults); an omitted max_tokens is 16 whatever the
	// config says. The output is capped by the room left in the context.
	sp, err := req.SamplingFields.Resolve(s.gen)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if slices.Contains(req.Stop, "") {
		// SamplingParams._verify_args: an empty string would match anywhere.
		openAIError(w, http.StatusBadRequest, "BadRequestError", "stop cannot contain an empty string.")
		return
	}
	sp.Stop = req.Stop
	sp.IncludeStopStr = req.IncludeStopStrInOutput
	sp.KeepSpecialTokens = req.SkipSpecialTokens != nil && !*req.SkipSpecialTokens
	sp.MaxTokens = lm.CompletionsMaxTokens
	if req.MaxTokens != nil {
		sp.MaxTokens = *req.MaxTokens
	}
	if len(prompt) > maxModelLen {
		openAIError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("the prompt (%d tokens) is longer than the model's context (%d)", len(prompt), maxModelLen))
		return
	}
	if sp.MaxTokens < 1 {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "max_tokens must be at least 1")
		return
	}
	sp.MaxTokens = min(sp.MaxTokens, maxModelLen-len(prompt))
	n := 1
	if req.N != nil {
		n = *req.N
	}
	if n < 1 || n > 64 {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "n must be in [1, 64]")
		return
	}
	if n > 1 && sp.Greedy() {
		openAIError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("n must be 1 when sampling greedily, got %d", n))
		return
	}
	var rng *rand.Rand
	if req.Seed != nil {
		rng = rand.New(rand.NewPCG(uint64(*req.Seed), 0x9e3779b97f4a7c15))
	} else {
		rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(s.requests.Load())))
	}
	// A token's string in logprobs: vLLM's "token_id:N" placeholder with
	// return_tokens_as_token_ids, else the token decoded alone (ill-formed
	// UTF-8 as U+FFFD, special tokens kept).
	tokenStr := func(id int) string {
		if req.ReturnTokensAsTokenIDs {
			return "token_id:" + strconv.Itoa(id)
		}
		t, _ := tk.DecodeText([]int{id}, false)
		return t
	}
	var promptLPs []any
	if req.PromptLogprobs != nil {
		lps := s.prefillScore(params, prompt)
		promptLPs = make([]any, len(prompt))
		for i := 1; i < len(prompt); i++ {
			t, _ := tk.DecodeText(prompt[i:i+1], false)
			promptLPs[i] = map[string]promptLogprob{strconv.Itoa(prompt[i]): {Logprob: lps[i], Rank: 1, DecodedToken: t}}
		}
	}
	var choices []map[string]any
	completionTokens, longest := 0, 0
	var generated []int // the first choice's ids, for the prefix cache
	for i := 0; i < n; i++ {
		g := s.model.Generate(params, prompt, sp, rng)
		completionTokens += len(g.IDs)
		longest = max(longest, len(g.IDs))
		if i == 0 {
			generated = g.IDs
		}
		choice := map[string]any{"index": i, "text": g.Text, "finish_reason": g.FinishReason, "stop_reason": nil}
		if g.StopReason != "" {
			choice["stop_reason"] = g.StopReason
		}
		if req.Logprobs != nil {
			toks := make([]string, len(g.IDs))
			top := make([]map[string]float64, len(g.IDs))
			for j, id := range g.IDs {
				toks[j] = tokenStr(id)
				top[j] = map[string]float64{toks[j]: g.Logprobs[j]}
			}
			choice["logprobs"] = map[string]any{"tokens": toks, "token_logprobs": g.Logprobs, "top_logprobs": top, "text_offset": textOffsets(toks)}
		} else {
			choice["logprobs"] = nil
		}
		if req.ReturnTokenIDs {
			choice["token_ids"] = g.IDs
			choice["prompt_token_ids"] = prompt
		}
		if promptLPs != nil {
			choice["prompt_logprobs"] = promptLPs
		} else {
			choice["prompt_logprobs"] = nil
		}
		choices = append(choices, choice)
	}
	if s.eng == nil {
		s.tokens.Add(int64(completionTokens))
	} else {
		prefill := s.prefill(prompt, generated)
		if !s.schedule(w, r, req.PromptLogprobs != nil, req.Seed, prefill, longest) {
			return
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"id": fmt.Sprintf("cmpl-sim-%d", s.requests.Load()), "object": "text_completion",
		"created": time.Now().Unix(), "model": req.Model, "choices": choices,
		"system_fingerprint": Fingerprint,
		"usage":              map[string]int{"prompt_tokens": len(prompt), "completion_tokens": completionTokens, "total_tokens": len(prompt) + completionTokens},
	})
}

// textOffsets is vLLM's text_offset (_create_completion_logprobs in
// entrypoints/openai/completion/serving.py): 0 for the first token, then
// each offset is the one before plus the length, in code points, of the
// token string returned before it. With return_tokens_as_token_ids those
// strings are the "token_id:N" placeholders, so the offsets count
// placeholder characters, not positions in the text.
func textOffsets(toks []string) []int {
	out := make([]int, len(toks))
	for j := 1; j < len(toks); j++ {
		out[j] = out[j-1] + utf8.RuneCountInString(toks[j-1])
	}
	return out
}

// schedule runs a computed completion through the engine: its prompt is
// prefilled in the step that admits it, then it decodes max(longest, 1)
// tokens plus its hidden think tokens (none for a scoring request: vLLM's
// prompt_logprobs, SGLang's logprob_start_len >= 0), one per step. It sets the X-Sim-* timing headers and reports
// whether the handler should answer (false: the client left, or the engine
// closed and the request was answered 503).
func (s *PolicyServer) schedule(w http.ResponseWriter, r *http.Request, scoring bool, seed *int64, promptTokens, longest int) bool {
	need := max(longest, 1)
	think := 0
	if !scoring {
		think = thinkTokens(s.lat.ThinkTokens, s.lat.ThinkSigma, seed)
	}
	seq := &sequence{prompt: promptTokens, need: need + think, ready: make(chan struct{})}
	if err := s.eng.submit(seq); err != nil {
		openAIError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", err.Error())
		return false
	}
	select {
	case <-seq.ready:
	case <-r.Context().Done():
		s.eng.cancel(seq)
		return false
	case <-s.eng.done:
		s.eng.cancel(seq)
		openAIError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", errEngineClosed.Error())
		return false
	}
	ms := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds()*1000, 'f', 3, 64) }
	h := w.Header()
	h.Set("X-Sim-Queue-Ms", ms(seq.admitted.Sub(seq.enqueued)))
	h.Set("X-Sim-Prefill-Ms", ms(seq.firstStep.Sub(seq.admitted)))
	h.Set("X-Sim-Decode-Ms", ms(seq.finished.Sub(seq.firstStep)))
	h.Set("X-Sim-Decode-Steps", strconv.Itoa(seq.need))
	h.Set("X-Sim-Think-Tokens", strconv.Itoa(think))
	return true
}

type tokenizeRequest struct {
	Model               string           `json:"model"`
	Prompt              *string          `json:"prompt"`
	AddSpecialTokens    *bool            `json:"add_special_tokens"`
	Messages            []lm.ChatMessage `json:"messages"`
	AddGenerationPrompt *bool            `json:"add_generation_prompt"`
	// ContinueFinalMessage leaves the last message open (vLLM refuses it
	// together with add_generation_prompt true).
	ContinueFinalMessage bool `json:"continue_final_message"`
	ReturnTokenStrs      bool `json:"return_token_strs"`
}

const maxModelLen = 32768

func (s *PolicyServer) tokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	err := s.ignored.Decode(w, r, "POST /tokenize", &req)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if _, ok := s.params(req.Model); !ok && req.Model != "" {
		openAIError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	var text string
	switch {
	case req.Prompt != nil && req.Messages == nil:
		text = *req.Prompt
	case req.Messages != nil && req.Prompt == nil:
		// vLLM's TokenizeChatRequest: add_generation_prompt defaults to
		// true; continue_final_message (default false) leaves the last
		// message open, and the two together are refused.
		gen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		if gen && req.ContinueFinalMessage {
			openAIError(w, http.StatusBadRequest, "BadRequestError", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
			return
		}
		text = lm.ChatTemplate(req.Messages, gen)
		if req.ContinueFinalMessage && len(req.Messages) > 0 {
			text = strings.TrimSuffix(text, lm.TokIMEnd+"\n")
		}
	default:
		openAIError(w, http.StatusBadRequest, "BadRequestError", "exactly one of prompt and messages is required")
		return
	}
	ids := s.model.Tokenizer().Encode(text)
	resp := map[string]any{"count": len(ids), "max_model_len": maxModelLen, "tokens": ids, "token_strs": nil}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

func (s *PolicyServer) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Tokens []int  `json:"tokens"`
	}
	err := s.ignored.Decode(w, r, "POST /detokenize", &req)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	// vLLM's /detokenize is the tokenizer's decode: a Python string, so
	// ill-formed UTF-8 (a token cut inside a character) comes back as
	// U+FFFD; special tokens are kept.
	text, ok := s.model.Tokenizer().DecodeText(req.Tokens, false)
	if !ok {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "token id out of vocabulary")
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"prompt": text})
}

func (s *PolicyServer) loadLoRA(w http.ResponseWriter, r *http.Request) {
	var req struct {
		LoRAName string `json:"lora_name"`
		LoRAPath string `json:"lora_path"`
	}
	err := s.ignored.Decode(w, r, "POST /v1/load_lora_adapter", &req)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	// vLLM's order (entrypoints/openai/models/serving.py @4fe45004):
	// both fields are checked first, then the name (400 InvalidUserInput),
	// then the engine loads the adapter: a failure whose text says "No
	// adapter found" is 404 NotFoundError, any other 400 BadRequestError
	// with the engine's text (older versions, e.g. @00153c8b, answered
	// 500 InternalServerError there, which a client's retry layer
	// retries).
	if req.LoRAName == "" || req.LoRAPath == "" {
		openAIError(w, http.StatusBadRequest, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	s.mu.RLock()
	_, dup := s.adapters[req.LoRAName]
	s.mu.RUnlock()
	if dup {
		openAIError(w, http.StatusBadRequest, "InvalidUserInput", fmt.Sprintf("The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", req.LoRAName))
		return
	}
	params, err := weights.ReadAdapter(filepath.Clean(req.LoRAPath))
	if errors.Is(err, fs.ErrNotExist) {
		openAIError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("Loading lora %s failed: No adapter found for %s", req.LoRAName, req.LoRAPath))
		return
	}
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("failed to load LoRA adapter '%s': %v", req.LoRAName, err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.adapters[req.LoRAName]; dup {
		openAIError(w, http.StatusBadRequest, "InvalidUserInput", fmt.Sprintf("The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", req.LoRAName))
		return
	}
	s.adapters[req.LoRAName] = params
	s.paths[req.LoRAName] = req.LoRAPath
	s.order = append(s.order, req.LoRAName)
	w.Header().Set(httpx.SimulatorHeader, "true")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.LoRAName)
}

func (s *PolicyServer) unloadLoRA(w http.ResponseWriter, r *http.Request) {
	var req struct {
		LoRAName  string `json:"lora_name"`
		LoRAIntID *int   `json:"lora_int_id"`
	}
	err := s.ignored.Decode(w, r, "POST /v1/unload_lora_adapter", &req)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.adapters[req.LoRAName]; !ok || req.LoRAName == s.baseModel {
		openAIError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", req.LoRAName))
		return
	}
	delete(s.adapters, req.LoRAName)
	delete(s.paths, req.LoRAName)
	for i, n := range s.order {
		if n == req.LoRAName {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.LoRAName)
}

func (s *PolicyServer) models(w http.ResponseWriter, r *http.Request) {
	served := s.servedName()
	s.mu.RLock()
	names := append([]string{served}, s.order...)
	paths := make(map[string]string, len(s.paths))
	for n, p := range s.paths {
		paths[n] = p
	}
	s.mu.RUnlock()
	var data []map[string]any
	for i, n := range names {
		// vLLM's model cards: the base model's root is its model path
		// (here its name), an adapter's the path it was loaded from, with
		// the base model as parent.
		m := map[string]any{"id": n, "object": "model", "owned_by": Fingerprint, "root": n, "parent": nil, "max_model_len": maxModelLen}
		if i > 0 {
			m["parent"] = served
			m["root"] = paths[n]
			delete(m, "max_model_len")
		}
		data = append(data, m)
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *PolicyServer) metrics(w http.ResponseWriter, r *http.Request) {
	st := s.Stats()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP vllm:num_requests_running Simulated (hindsearch simulator): requests running.\n")
	fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\n")
	fmt.Fprintf(w, "vllm:num_requests_running{model_name=%q} %d\n", s.baseModel, st.Running)
	fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\n")
	fmt.Fprintf(w, "vllm:num_requests_waiting{model_name=%q} %d\n", s.baseModel, st.Waiting)
	fmt.Fprintf(w, "# HELP hindsearch_sim_busy_seconds_total Simulated: wall time with at least one sequence running or prefilling.\n")
	fmt.Fprintf(w, "# TYPE hindsearch_sim_busy_seconds_total counter\n")
	fmt.Fprintf(w, "hindsearch_sim_busy_seconds_total{model_name=%q} %g\n", s.baseModel, st.BusySeconds)
	fmt.Fprintf(w, "# TYPE hindsearch_sim_decode_steps_total counter\n")
	fmt.Fprintf(w, "hindsearch_sim_decode_steps_total{model_name=%q} %d\n", s.baseModel, st.DecodeSteps)
	fmt.Fprintf(w, "# TYPE hindsearch_sim_tokens_total counter\n")
	fmt.Fprintf(w, "hindsearch_sim_tokens_total{model_name=%q} %d\n", s.baseModel, st.Tokens)
}

// LoadedAdapters lists the adapter names currently served, oldest first.
func (s *PolicyServer) LoadedAdapters() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := append([]string(nil), s.order...)
	sort.Strings(out)
	return out
}
