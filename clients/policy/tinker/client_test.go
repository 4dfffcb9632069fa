package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
)

// vocab is a toy tokenizer: each id's bytes.
type vocab map[int]string

func (v vocab) TokenBytes(id int) ([]byte, bool) {
	s, ok := v[id]
	return []byte(s), ok
}

var toy = vocab{1: "<think>", 2: "x", 3: "</think>", 4: "<search>", 5: " q ", 6: "</search>", 7: "\n", 9: "<|im_end|>", 10: "\xe4\xbd", 11: "\xa0"}

// server is a fake Tinker server's sampling routes: sessions, sampling
// sessions, asample futures answered by result.
type server struct {
	*fake.Server
	mu     sync.Mutex
	n      int
	result func(body map[string]any) any
	// expire answers the next n polls 410.
	expire int
}

func newServer(t *testing.T) *server {
	s := &server{Server: fake.New(t)}
	s.HandleJSON("/api/v1/create_session", 200, map[string]any{"session_id": "session_1", "type": "create_session"})
	s.HandleJSON("/api/v1/session_heartbeat", 200, map[string]any{"type": "session_heartbeat"})
	s.Handle("/api/v1/create_sampling_session", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		s.mu.Lock()
		s.n++
		id := "sampling_" + strings.Repeat("a", s.n)
		s.mu.Unlock()
		fake.WriteJSON(w, 200, map[string]any{"type": "create_sampling_session", "sampling_session_id": id})
	})
	results := map[string]any{}
	s.Handle("/api/v1/asample", func(w http.ResponseWriter, _ *http.Request, raw []byte) {
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		s.mu.Lock()
		s.n++
		id := strings.Repeat("r", s.n)
		results[id] = s.result(body)
		s.mu.Unlock()
		fake.WriteJSON(w, 200, map[string]any{"future_id": id, "status": "pending", "request_id": id})
	})
	s.Handle("/api/v1/retrieve_future", func(w http.ResponseWriter, _ *http.Request, raw []byte) {
		var body struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(raw, &body)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.expire > 0 {
			s.expire--
			fake.WriteJSON(w, 410, map[string]any{"detail": "expired"})
			return
		}
		fake.WriteJSON(w, 200, results[body.RequestID])
	})
	return s
}

func newClient(t *testing.T, s *server) *Client {
	o := transport.DefaultOptions("policy", s.URL)
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 5*time.Millisecond
	tc, err := trainer.New(o, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(tc, Options{BaseModel: "Qwen/Qwen2.5-3B-Instruct", Tokens: toy, EndTokens: []string{"<|im_end|>"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func seq(tokens []int, stop string) map[string]any {
	lps := make([]float64, len(tokens))
	for i := range lps {
		lps[i] = -0.25 * float64(i+1)
	}
	return map[string]any{"sequences": []any{map[string]any{"tokens": tokens, "logprobs": lps, "stop_reason": stop}},
		"prompt_logprobs": nil, "topk_prompt_logprobs": nil, "type": "sample"}
}

// A completion is the SDK's asample on a sampling session over the base
// model: the prompt as one encoded_text chunk, every sampling field sent,
// the model's end tokens added to the stop strings, the backpressure
// header; its text is the ids' bytes cut after the stop string.
func TestCompleteSendsTheSDKsSampleRequest(t *testing.T) {
	s := newServer(t)
	s.result = func(map[string]any) any { return seq([]int{1, 2, 3, 4, 5, 6, 7}, "stop") }
	c := newClient(t, s)
	seed := int64(7)
	sp := policy.Neutral()
	sp.Temperature, sp.TopK = 0.9, 0
	got, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "Qwen/Qwen2.5-3B-Instruct", Prompt: []int{5, 2},
		MaxTokens: 64, Sampling: sp, Seed: &seed, Stop: []string{"</search>", "</answer>"}})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.Requests("/api/v1/create_sampling_session")
	if len(cs) != 1 {
		t.Fatalf("%d create_sampling_session calls, want 1", len(cs))
	}
	fake.AssertJSON(t, cs[0].Body, `{"session_id": "session_1", "sampling_session_seq_id": 0, "base_model": "Qwen/Qwen2.5-3B-Instruct", "type": "create_sampling_session"}`)
	reqs := s.Requests("/api/v1/asample")
	if len(reqs) != 1 {
		t.Fatalf("%d asample calls, want 1", len(reqs))
	}
	fake.AssertJSON(t, reqs[0].Body, `{"sampling_session_id": "sampling_a", "seq_id": 0, "num_samples": 1,
		"prompt": {"chunks": [{"tokens": [5, 2], "type": "encoded_text"}]},
		"sampling_params": {"max_tokens": 64, "seed": 7, "stop": ["</search>", "</answer>", "<|im_end|>"], "temperature": 0.9, "top_k": -1, "top_p": 1},
		"prompt_logprobs": false, "topk_prompt_logprobs": 0, "type": "sample"}`)
	if h := reqs[0].Header.Get("X-Tinker-Sampling-Backpressure"); h != "1" {
		t.Errorf("X-Tinker-Sampling-Backpressure %q, want 1", h)
	}
	if got.Text != "<think>x</think><search> q </search>" || got.StopReason != "</search>" || got.FinishReason != "stop" {
		t.Errorf("text %q stop %q finish %q", got.Text, got.StopReason, got.FinishReason)
	}
	if len(got.TokenIDs) != 7 || len(got.Logprobs) != 7 || got.Logprobs[6] != -1.75 {
		t.Errorf("ids %v logprobs %v", got.TokenIDs, got.Logprobs)
	}
	// The next request on the session takes the next seq_id.
	if _, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "Qwen/Qwen2.5-3B-Instruct", Prompt: []int{5}, MaxTokens: 4, Sampling: policy.Neutral()}); err != nil {
		t.Fatal(err)
	}
	var second map[string]any
	_ = json.Unmarshal(s.Requests("/api/v1/asample")[1].Body, &second)
	if second["seq_id"] != 1.0 {
		t.Errorf("second seq_id %v, want 1", second["seq_id"])
	}
	if _, ok := second["sampling_params"].(map[string]any)["seed"]; ok {
		t.Error("a request without a seed sent one")
	}
}

// A turn ending at an end token names it, and an incomplete character at
// the end is held back, as vLLM's detokenizer holds it.
func TestCompleteEndTokenAndIncompleteCharacter(t *testing.T) {
	s := newServer(t)
	s.result = func(map[string]any) any { return seq([]int{2, 10, 11, 9}, "stop") }
	c := newClient(t, s)
	got, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "Qwen/Qwen2.5-3B-Instruct", Prompt: []int{5}, MaxTokens: 8, Sampling: policy.Neutral()})
	if err != nil {
		t.Fatal(err)
	}
	if got.Text != "x你<|im_end|>" || got.StopReason != "" || got.StopTokenID == nil || *got.StopTokenID != 9 {
		t.Errorf("text %q stop %q token %v", got.Text, got.StopReason, got.StopTokenID)
	}
	s.result = func(map[string]any) any { return seq([]int{2, 10}, "length") }
	got, err = c.Complete(context.Background(), policy.CompletionRequest{Model: "Qwen/Qwen2.5-3B-Instruct", Prompt: []int{5}, MaxTokens: 2, Sampling: policy.Neutral()})
	if err != nil {
		t.Fatal(err)
	}
	if got.Text != "x" || got.FinishReason != "length" {
		t.Errorf("text %q finish %q, want the incomplete character held back", got.Text, got.FinishReason)
	}
}

// Tinker samples with temperature, top_k and top_p only: anything else is
// refused before a request is sent, as are names with no session.
func TestCompleteRefusesWhatTinkerCannotSample(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s)
	for _, edit := range []func(*policy.Sampling){
		func(sp *policy.Sampling) { sp.MinP = 0.05 },
		func(sp *policy.Sampling) { sp.RepetitionPenalty = 1.05 },
		func(sp *policy.Sampling) { sp.PresencePenalty = 0.5 },
		func(sp *policy.Sampling) { sp.FrequencyPenalty = 0.5 },
	} {
		sp := policy.Neutral()
		edit(&sp)
		_, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "Qwen/Qwen2.5-3B-Instruct", Prompt: []int{5}, MaxTokens: 4, Sampling: sp})
		if err == nil || !strings.Contains(err.Error(), "temperature, top_k and top_p only") {
			t.Errorf("%+v: %v", sp, err)
		}
	}
	_, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "run-step0001", Prompt: []int{5}, MaxTokens: 4, Sampling: policy.Neutral()})
	if !errors.Is(err, ErrNotServed) {
		t.Errorf("unknown model: %v", err)
	}
	if n := len(s.Requests("/api/v1/asample")); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// Score is an asample of one token with prompt_logprobs; SkyRL's vLLM
// paths report one entry per prompt token (the first null), its JAX
// backend one fewer: both read as entry 0 = 0.
func TestScoreReadsBothPromptLogprobShapes(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s)
	c.Serve("run-step0001", "sampling_x")
	for _, lps := range [][]any{{nil, -1.0, -2.0}, {-1.0, -2.0}} {
		s.result = func(map[string]any) any {
			r := seq([]int{2}, "length")
			r["prompt_logprobs"] = lps
			return r
		}
		got, err := c.Score(context.Background(), "run-step0001", []int{5, 2, 7})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0] != 0 || got[1] != -1 || got[2] != -2 {
			t.Errorf("prompt_logprobs %v: score %v", lps, got)
		}
	}
	reqs := s.Requests("/api/v1/asample")
	fake.AssertJSON(t, reqs[0].Body, `{"sampling_session_id": "sampling_x", "seq_id": 0, "num_samples": 1,
		"prompt": {"chunks": [{"tokens": [5, 2, 7], "type": "encoded_text"}]},
		"sampling_params": {"max_tokens": 1, "seed": 0, "stop": [], "temperature": 1, "top_k": -1, "top_p": 1},
		"prompt_logprobs": true, "topk_prompt_logprobs": 0, "type": "sample"}`)
	s.result = func(map[string]any) any { return seq([]int{2}, "length") }
	if _, err := c.Score(context.Background(), "run-step0001", []int{5, 2, 7}); err == nil {
		t.Error("a result without prompt_logprobs was read")
	}
}

// A 429 is waited out (the shared pause) and the same request, same
// seq_id, sent again; an expired future (410) is sent again with a new
// seq_id.
func TestBackpressureAndExpiredFutures(t *testing.T) {
	s := newServer(t)
	s.result = func(map[string]any) any { return seq([]int{2}, "length") }
	c := newClient(t, s)
	c.Serve("m", "sampling_m")
	s.FailNext("/api/v1/asample", 1, http.StatusTooManyRequests, nil, `{"detail":"rate limited"}`)
	t0 := time.Now()
	if _, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "m", Prompt: []int{5}, MaxTokens: 1, Sampling: policy.Neutral()}); err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests("/api/v1/asample")
	if len(reqs) != 2 || string(reqs[0].Body) != string(reqs[1].Body) {
		t.Fatalf("%d asample requests after a 429, want the same one twice", len(reqs))
	}
	if waited := time.Since(t0); waited < BackoffSmall/2 {
		t.Errorf("sent again after %s: the 429's pause was not waited out", waited)
	}
	s.mu.Lock()
	s.expire = 1
	s.mu.Unlock()
	if _, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "m", Prompt: []int{5}, MaxTokens: 1, Sampling: policy.Neutral()}); err != nil {
		t.Fatal(err)
	}
	reqs = s.Requests("/api/v1/asample")
	var a, b map[string]any
	_ = json.Unmarshal(reqs[2].Body, &a)
	_ = json.Unmarshal(reqs[3].Body, &b)
	if len(reqs) != 4 || a["seq_id"] != 1.0 || b["seq_id"] != 2.0 {
		t.Errorf("after a 410: %d requests, seq_ids %v then %v; want the request sent again with the next seq_id", len(reqs), a["seq_id"], b["seq_id"])
	}
}

// A server that keeps refusing with 429 fails the call once MaxBackoff is
// spent, naming the refusal.
func TestBackpressureIsBounded(t *testing.T) {
	s := newServer(t)
	c := newClient(t, s)
	c.opts.MaxBackoff = time.Millisecond
	c.Serve("m", "sampling_m")
	s.FailNext("/api/v1/asample", 5, http.StatusTooManyRequests, nil, `{"detail":"rate limited"}`)
	_, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "m", Prompt: []int{5}, MaxTokens: 1, Sampling: policy.Neutral()})
	if err == nil || !transport.IsStatus(err, http.StatusTooManyRequests) || !strings.Contains(err.Error(), "backing off") {
		t.Fatalf("%v, want the 429 after backing off", err)
	}
}

// SkyRL's FSDP backend answers zeros for the logprobs its vLLM did not
// return (source audit C5): a sample of four or more tokens whose every
// logprob is exactly 0 is refused with ErrZeroLogprobs, never trained on;
// a short one (one token at probability 1 by rounding) is not.
func TestCompleteRefusesZeroFilledLogprobs(t *testing.T) {
	s := newServer(t)
	zeros := func(tokens []int) any {
		r := seq(tokens, "length")
		sq := r["sequences"].([]any)[0].(map[string]any)
		sq["logprobs"] = make([]float64, len(tokens))
		return r
	}
	c := newClient(t, s)
	req := policy.CompletionRequest{Model: "Qwen/Qwen2.5-3B-Instruct", Prompt: []int{5}, MaxTokens: 4, Sampling: policy.Neutral()}
	s.result = func(map[string]any) any { return zeros([]int{2, 2, 2, 2}) }
	if _, err := c.Complete(context.Background(), req); !errors.Is(err, ErrZeroLogprobs) {
		t.Errorf("four zero logprobs: %v, want ErrZeroLogprobs", err)
	}
	s.result = func(map[string]any) any { return zeros([]int{2}) }
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Errorf("one token at logprob 0: %v", err)
	}
}
