package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
)

func judgeRequest(t *testing.T, url, key string, body any) (int, map[string]any, http.Header) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out, resp.Header
}

// TestJudgeAuthAndProtocol checks the bearer key, the OpenAI chat shapes,
// the labels and the request validation of the simulated judge.
func TestJudgeAuthAndProtocol(t *testing.T) {
	f := getFixture(t)
	js := NewJudgeServer("judge-model", "s3cret", f.corpus[:200])
	srv := httptest.NewServer(js.Handler())
	t.Cleanup(srv.Close)
	q := f.hotpot[0]
	body := map[string]any{"model": "judge-model", "max_tokens": 300, "temperature": 0, "seed": 1,
		"messages": []map[string]string{{"role": "user", "content": judgePrompt(q.Q, q.Answers, thoughtAnswer+"<answer> Lavatera </answer>")}}}
	for _, key := range []string{"", "wrong", "S3CRET"} {
		st, out, h := judgeRequest(t, srv.URL, key, body)
		if st != http.StatusUnauthorized || h.Get(httpx.SimulatorHeader) != "true" || out["error"] == nil {
			t.Errorf("key %q: %d %v", key, st, out)
		}
	}
	st, out, h := judgeRequest(t, srv.URL, "s3cret", body)
	if st != 200 || h.Get(httpx.SimulatorHeader) != "true" || out["system_fingerprint"] != Fingerprint || out["object"] != "chat.completion" {
		t.Fatalf("judge: %d %v", st, out)
	}
	msg := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	content := msg["content"].(string)
	if msg["role"] != "assistant" || quoted(content) == "" {
		t.Errorf("critique %q", content)
	}
	// max_tokens cuts the critique.
	short := map[string]any{"model": "judge-model", "max_tokens": 3, "messages": body["messages"]}
	if _, out, _ := judgeRequest(t, srv.URL, "s3cret", short); len(f.tk.Encode(out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string))) > 3 {
		t.Errorf("max_tokens 3 did not cut the critique: %v", out)
	}
	for name, b := range map[string]map[string]any{
		"unknown model": {"model": "other", "messages": body["messages"]},
		"no messages":   {"model": "judge-model", "messages": []any{}},
	} {
		st, out, h := judgeRequest(t, srv.URL, "s3cret", b)
		if st < 400 || h.Get(httpx.SimulatorHeader) != "true" || out["error"] == nil {
			t.Errorf("%s: %d %v", name, st, out)
		}
	}
	// /v1/models and /health need no key.
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"judge-model"`)) || !bytes.Contains(b, []byte(Fingerprint)) {
		t.Errorf("/v1/models: %d %s", resp.StatusCode, b)
	}
	// Without a configured key, none is needed.
	open := httptest.NewServer(NewJudgeServer("judge-model", "", nil).Handler())
	t.Cleanup(open.Close)
	if st, out, _ := judgeRequest(t, open.URL, "", body); st != 200 {
		t.Errorf("no key configured: %d %v", st, out)
	}
}
