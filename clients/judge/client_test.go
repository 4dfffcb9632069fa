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
		MaxTokens: 256, Temperature: 0, Seed: &seed,
	})
	if err != nil || got != "Verdict: correct" {
		t.Fatalf("%q %v", got, err)
	}
	r := s.Requests("/v1/chat/completions")[0]
	fake.AssertJSON(t, r.Body, `{"model":"judge-model","messages":[{"role":"system","content":"be strict"},{"role":"user","content":"grade"}],"max_tokens":256,"temperature":0,"seed":7}`)
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
	if _, err := c.Chat(context.Background(), ChatRequest{Messages: []Message{{Role: "user", Content: "grade"}}, MaxTokens: 64, Temperature: 0.5}); err != nil {
		t.Fatal(err)
	}
	r := s.Requests("/v1/chat/completions")[0]
	fake.AssertJSON(t, r.Body, `{"model":"judge-model","messages":[{"role":"user","content":"grade"}],"max_tokens":64,"temperature":0.5}`)
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
