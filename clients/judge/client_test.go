package judge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
	"github.com/hindsearch/hindsearch/clients/transport"
)

const secret = "sk-test-0123456789abcdef"

func newTest(t *testing.T, key string) (*fake.Server, *Client) {
	t.Helper()
	s := fake.New(t)
	o := transport.DefaultOptions("judge", s.URL)
	o.Timeout = 2 * time.Second
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 2*time.Millisecond
	c, err := New(o, "judge-model", key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return s, c
}

func okAnswer(s *fake.Server) {
	s.HandleJSON("/v1/chat/completions", 200, map[string]any{
		"id": "c1", "object": "chat.completion",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "Verdict: correct"}}},
	})
}

func TestChatWithKey(t *testing.T) {
	s, c := newTest(t, secret)
	okAnswer(s)
	seed := int64(7)
	got, err := c.Chat(context.Background(), ChatRequest{
		Messages:  []Message{{Role: "system", Content: "be strict"}, {Role: "user", Content: "grade"}},
		MaxTokens: 256, Sampling: Greedy(), Seed: &seed,
	})
	if err != nil || got != "Verdict: correct" {
		t.Fatalf("%q %v", got, err)
	}
	r := s.Requests("/v1/chat/completions")[0]
	// A vLLM judge gets every sampling field, byte for byte: an omitted
	// one would come from its model's generation_config.json.
	if got, want := string(r.Body), `{"model":"judge-model","messages":[{"role":"system","content":"be strict"},{"role":"user","content":"grade"}],`+
		`"max_tokens":256,"temperature":0,"top_p":1,"top_k":-1,"min_p":0,"repetition_penalty":1,"presence_penalty":0,"frequency_penalty":0,"seed":7}`; got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
	if h := r.Header.Get("Authorization"); h != "Bearer "+secret {
		t.Fatalf("authorization %q", h)
	}
	// Errors never carry the key, even when the server echoes it.
	s.FailNext("", 1, 401, nil, `{"error":{"message":"Incorrect API key provided: `+secret+`"}}`)
	_, err = c.Chat(context.Background(), ChatRequest{Messages: []Message{{Role: "user", Content: "x"}}, MaxTokens: 1})
	if !transport.IsStatus(err, 401) || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "Bearer") {
		t.Fatalf("err %v", err)
	}
	s.FailNext("", 10, 503, nil, `overloaded `+secret)
	_, err = c.Chat(context.Background(), ChatRequest{MaxTokens: 1})
	if !transport.IsStatus(err, 503) || strings.Contains(err.Error(), secret) {
		t.Fatalf("err %v", err)
	}
}

func TestChatWithoutKey(t *testing.T) {
	s, c := newTest(t, "")
	okAnswer(s)
	sp := Sampling{Temperature: 0.5, TopP: 0.9, TopK: 20, MinP: 0.05, RepetitionPenalty: 1.05, PresencePenalty: 0.5, FrequencyPenalty: -0.5}
	if _, err := c.Chat(context.Background(), ChatRequest{Messages: []Message{{Role: "user", Content: "grade"}}, MaxTokens: 64, Sampling: sp}); err != nil {
		t.Fatal(err)
	}
	r := s.Requests("/v1/chat/completions")[0]
	fake.AssertJSON(t, r.Body, `{"model":"judge-model","messages":[{"role":"user","content":"grade"}],"max_tokens":64,
		"temperature":0.5,"top_p":0.9,"top_k":20,"min_p":0.05,"repetition_penalty":1.05,"presence_penalty":0.5,"frequency_penalty":-0.5}`)
	if _, ok := r.Header["Authorization"]; ok {
		t.Fatal("authorization header sent without a key")
	}
}

func TestChatBadAnswers(t *testing.T) {
	s, c := newTest(t, secret)
	s.HandleJSON("/v1/chat/completions", 200, map[string]any{"choices": []any{}})
	_, err := c.Chat(context.Background(), ChatRequest{MaxTokens: 1})
	if err == nil || !strings.Contains(err.Error(), "no choices") || !strings.Contains(err.Error(), s.URL) {
		t.Fatalf("err %v", err)
	}
	s.HandleJSON("/v1/chat/completions", 200, map[string]any{"choices": []any{map[string]any{"message": map[string]any{"content": nil}}}})
	_, err = c.Chat(context.Background(), ChatRequest{MaxTokens: 1})
	if err == nil || !strings.Contains(err.Error(), "null message content") {
		t.Fatalf("err %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New(transport.DefaultOptions("judge", "127.0.0.1:9"), "m", secret)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("err %v", err)
	}
	if _, err := New(transport.DefaultOptions("judge", "http://127.0.0.1:9"), "", ""); err == nil {
		t.Fatal("no error without model")
	}
}

// A hosted OpenAI judge gets only the fields OpenAI defines (it rejects
// top_k, min_p and repetition_penalty), and max_completion_tokens when
// asked; a sampling setting it cannot carry is an error, not dropped.
func TestChatHostedOpenAIBodies(t *testing.T) {
	seed := int64(3)
	req := ChatRequest{Messages: []Message{{Role: "user", Content: "grade"}}, MaxTokens: 128, Sampling: Greedy(), Seed: &seed}
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"openai", []Option{WithAPI(APIOpenAI)},
			`{"model":"judge-model","messages":[{"role":"user","content":"grade"}],"max_tokens":128,"temperature":0,"top_p":1,"presence_penalty":0,"frequency_penalty":0,"seed":3}`},
		{"openai max_completion_tokens", []Option{WithAPI(APIOpenAI), WithMaxTokensField(MaxCompletionTokensField)},
			`{"model":"judge-model","messages":[{"role":"user","content":"grade"}],"max_completion_tokens":128,"temperature":0,"top_p":1,"presence_penalty":0,"frequency_penalty":0,"seed":3}`},
		{"vllm max_completion_tokens", []Option{WithAPI(APIVLLM), WithMaxTokensField(MaxCompletionTokensField)},
			`{"model":"judge-model","messages":[{"role":"user","content":"grade"}],"max_completion_tokens":128,"temperature":0,"top_p":1,"top_k":-1,"min_p":0,"repetition_penalty":1,"presence_penalty":0,"frequency_penalty":0,"seed":3}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fake.New(t)
			okAnswer(s)
			o := transport.DefaultOptions("judge", s.URL)
			c, err := New(o, "judge-model", "", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			if _, err := c.Chat(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if got := string(s.Requests("/v1/chat/completions")[0].Body); got != tc.want {
				t.Fatalf("body\n got %s\nwant %s", got, tc.want)
			}
		})
	}
	s := fake.New(t)
	okAnswer(s)
	c, err := New(transport.DefaultOptions("judge", s.URL), "judge-model", "", WithAPI(APIOpenAI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	bad := req
	bad.TopK = 20
	if _, err := c.Chat(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "top_k 20") {
		t.Fatalf("err %v", err)
	}
	if n := len(s.Requests("/v1/chat/completions")); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
	for _, o := range []Option{WithAPI("anthropic"), WithMaxTokensField("max_new_tokens")} {
		if _, err := New(transport.DefaultOptions("judge", s.URL), "m", "", o); err == nil {
			t.Error("New took an unknown wire option")
		}
	}
}
