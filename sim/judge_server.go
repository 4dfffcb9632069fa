package sim

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// JudgeServer is the simulated judge: an OpenAI-compatible chat endpoint
// (PROTOCOLS.md §3) serving the judge model lm.Judge, which reads the
// orchestrator's critique prompt and writes a short, directive critique of
// the search behaviour.
type JudgeServer struct {
	// Delay is the simulated time of one chat request (Latency.Judge);
	// set it before the server takes requests.
	Delay time.Duration

	model  string
	apiKey string
	// judge is the model that writes the critiques.
	judge *lm.Judge
	calls atomic.Int64
	gen   lm.GenerationConfig
	// tk is Qwen2.5's tokenizer (the judge model's), for token counts and
	// the token cap; tkErr is why there is none.
	tk    *lm.Tokenizer
	tkErr error
	// ignored counts the request fields accepted and ignored (vLLM's chat
	// request model ignores the fields it lacks).
	ignored ignoredFields
}

// SetGenerationConfig sets the generation config the judge model ships: a
// request's omitted sampling fields take its values, as vLLM's chat
// completions do. Call it before the server takes requests.
func (s *JudgeServer) SetGenerationConfig(gc lm.GenerationConfig) { s.gen = gc }

// SetTokenizer makes the judge count and cap tokens with tk (Qwen2.5's, as
// NewJudgeServer's own) instead of a tokenizer of its own. Call it before
// the server takes requests.
func (s *JudgeServer) SetTokenizer(tk *lm.Tokenizer) { s.tk, s.tkErr = tk, nil }

// Calls returns the number of chat requests answered or being answered
// (requests refused before the model check are not counted).
func (s *JudgeServer) Calls() int64 { return s.calls.Load() }

// NewJudgeServer returns a simulated judge serving model over corpus (the
// wiki-18 contents strings), whose generation config is
// lm.QwenInstructGenerationConfig's and whose tokens are Qwen2.5's. A
// non-empty apiKey is required as a bearer token.
func NewJudgeServer(model, apiKey string, corpus []string) *JudgeServer {
	s := &JudgeServer{model: model, apiKey: apiKey, judge: lm.NewJudge(corpus), gen: lm.QwenInstructGenerationConfig()}
	s.tk, s.tkErr = lm.NewTokenizer()
	return s
}

// Critique is the judge model's greedy critique for one prompt
// (lm.Judge.Critique): what the server answers at temperature 0.
func (s *JudgeServer) Critique(prompt string) string { return s.judge.Critique(prompt) }

// Critiques lists the judge model's candidate critiques for one prompt,
// best first (lm.Judge.Critiques).
func (s *JudgeServer) Critiques(prompt string) []string { return s.judge.Critiques(prompt) }

// IgnoredFields returns, for every "ROUTE FIELD" that requests carried and
// the server ignored, the number of requests that carried it (see
// PolicyServer.IgnoredFields).
func (s *JudgeServer) IgnoredFields() map[string]int { return s.ignored.Snapshot() }

// Handler returns the server's routes.
func (s *JudgeServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{"id": s.model, "object": "model", "owned_by": Fingerprint}}})
	})
	return httpx.Labelled(mux)
}

func (s *JudgeServer) chat(w http.ResponseWriter, r *http.Request) {
	if s.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+s.apiKey {
		openAIError(w, http.StatusUnauthorized, "AuthenticationError", "invalid or missing bearer token")
		return
	}
	var req struct {
		Model               string           `json:"model"`
		Messages            []lm.ChatMessage `json:"messages"`
		MaxTokens           *int             `json:"max_tokens"`
		MaxCompletionTokens *int             `json:"max_completion_tokens"`
		lm.SamplingFields
		Seed *int64 `json:"seed"`
	}
	err := s.ignored.Decode(w, r, "POST /v1/chat/completions", &req)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	// Omitted sampling fields come from the generation config, then
	// vLLM's defaults; the token cap is max_completion_tokens, else
	// max_tokens, else the config's max_new_tokens, else the room left in
	// the context.
	sp, err := req.SamplingFields.Resolve(s.gen)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	if s.tk == nil {
		openAIError(w, http.StatusInternalServerError, "InternalServerError", s.tkErr.Error())
		return
	}
	// The prompt is the chat template's, in Qwen2.5's tokens.
	promptTokens := len(s.tk.Encode(lm.ChatTemplate(req.Messages, true)))
	maxTokens := maxModelLen - promptTokens
	switch {
	case req.MaxCompletionTokens != nil:
		maxTokens = min(*req.MaxCompletionTokens, maxTokens)
	case req.MaxTokens != nil:
		maxTokens = min(*req.MaxTokens, maxTokens)
	case s.gen.MaxNewTokens != nil:
		maxTokens = min(*s.gen.MaxNewTokens, maxTokens)
	}
	if maxTokens < 1 {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "max_tokens must be at least 1")
		return
	}
	if req.Model != s.model {
		openAIError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if len(req.Messages) == 0 {
		openAIError(w, http.StatusBadRequest, "BadRequestError", "messages must not be empty")
		return
	}
	n := s.calls.Add(1)
	if !sleepCtx(r.Context(), s.Delay) {
		return // the client left
	}
	var rng *rand.Rand
	if req.Seed != nil {
		rng = rand.New(rand.NewPCG(uint64(*req.Seed), 0x6a75646765))
	} else {
		rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(n)))
	}
	content := s.judge.Sample(req.Messages[len(req.Messages)-1].Content, sp, rng)
	// The critique ends with <|im_end|>, one more token; past the cap it
	// is cut after maxTokens tokens, as a length stop cuts it.
	ids := s.tk.Encode(content)
	finish, completionTokens := "stop", len(ids)+1
	if len(ids) > maxTokens {
		content, finish, completionTokens = lm.StreamText(s.tk, ids[:maxTokens]), "length", maxTokens
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"id": fmt.Sprintf("chatcmpl-sim-%d", n), "object": "chat.completion", "created": time.Now().Unix(),
		"model": s.model, "system_fingerprint": Fingerprint,
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": finish}},
		"usage": map[string]int{"prompt_tokens": promptTokens, "completion_tokens": completionTokens,
			"total_tokens": promptTokens + completionTokens},
	})
}
