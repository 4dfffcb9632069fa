package policy

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
	"github.com/hindsearch/hindsearch/clients/transport"
)

func newTest(t *testing.T) (*fake.Server, *Client) {
	t.Helper()
	s := fake.New(t)
	o := transport.DefaultOptions("policy", s.URL)
	o.Timeout = 2 * time.Second
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 2*time.Millisecond
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return s, c
}

func lastBody(t *testing.T, s *fake.Server, path string) []byte {
	t.Helper()
	r := s.Requests(path)
	if len(r) == 0 {
		t.Fatalf("no request to %s", path)
	}
	return r[len(r)-1].Body
}

const completionAnswer = `{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,
 "text":" hi</search>\n","logprobs":{"text_offset":[0,3,12],"token_logprobs":[-0.5,-0.25,-1.0],
 "tokens":["token_id:15","token_id:7","token_id:198"],"top_logprobs":[{"token_id:15":-0.5},{"token_id:7":-0.25},{"token_id:198":-1.0}]},
 "finish_reason":"stop","stop_reason":"</search>"}],"usage":{"prompt_tokens":3,"completion_tokens":3}}`

func TestComplete(t *testing.T) {
	s, c := newTest(t)
	s.Handle("/v1/completions", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		_, _ = w.Write([]byte(completionAnswer))
	})
	seed := int64(42)
	got, err := c.Complete(context.Background(), CompletionRequest{
		Model: "lora-3", Prompt: []int{1, 2, 3}, MaxTokens: 500, Sampling: Neutral(),
		Seed: &seed, Stop: []string{"</search>", "</answer>"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every sampling field is in the body, byte for byte: an omitted one
	// would be taken from the model's generation_config.json.
	if got, want := string(lastBody(t, s, "/v1/completions")), `{"model":"lora-3","prompt":[1,2,3],"max_tokens":500,`+
		`"temperature":1,"top_p":1,"top_k":-1,"min_p":0,"repetition_penalty":1,"presence_penalty":0,"frequency_penalty":0,`+
		`"seed":42,"n":1,"stop":["\u003c/search\u003e","\u003c/answer\u003e"],`+
		`"include_stop_str_in_output":true,"skip_special_tokens":false,"logprobs":1,"return_tokens_as_token_ids":true}`; got != want {
		t.Fatalf("rollout body\n got %s\nwant %s", got, want)
	}
	if got.Text != " hi</search>\n" || got.FinishReason != "stop" || got.StopReason != "</search>" || got.StopTokenID != nil {
		t.Fatalf("%+v", got)
	}
	if !slices.Equal(got.TokenIDs, []int{15, 7, 198}) || !slices.Equal(got.TextOffsets, []int{0, 3, 12}) {
		t.Fatalf("%+v", got)
	}
	if len(got.Logprobs) != 3 || got.Logprobs[0] != -0.5 || got.Logprobs[1] != -0.25 || got.Logprobs[2] != -1 {
		t.Fatalf("%+v", got.Logprobs)
	}

	// No seed, no stop: seed omitted, stop an empty list; each sampling
	// field as given.
	sp := Sampling{Temperature: 0.5, TopP: 0.9, TopK: 20, MinP: 0.05, RepetitionPenalty: 1.05, PresencePenalty: -0.5, FrequencyPenalty: 0.25}
	if _, err := c.Complete(context.Background(), CompletionRequest{Model: "m", Prompt: []int{9}, MaxTokens: 16, Sampling: sp}); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, lastBody(t, s, "/v1/completions"), `{"model":"m","prompt":[9],"max_tokens":16,
		"temperature":0.5,"top_p":0.9,"top_k":20,"min_p":0.05,"repetition_penalty":1.05,"presence_penalty":-0.5,"frequency_penalty":0.25,
		"n":1,"stop":[],
		"include_stop_str_in_output":true,"skip_special_tokens":false,"logprobs":1,"return_tokens_as_token_ids":true}`)

	// Greedy evaluation: temperature 0 and every other field neutral.
	if _, err := c.Complete(context.Background(), CompletionRequest{Model: "m", Prompt: []int{9}, MaxTokens: 500, Sampling: Greedy(), Seed: &seed, Stop: []string{"</answer>"}}); err != nil {
		t.Fatal(err)
	}
	if got, want := string(lastBody(t, s, "/v1/completions")), `{"model":"m","prompt":[9],"max_tokens":500,`+
		`"temperature":0,"top_p":1,"top_k":-1,"min_p":0,"repetition_penalty":1,"presence_penalty":0,"frequency_penalty":0,`+
		`"seed":42,"n":1,"stop":["\u003c/answer\u003e"],`+
		`"include_stop_str_in_output":true,"skip_special_tokens":false,"logprobs":1,"return_tokens_as_token_ids":true}`; got != want {
		t.Fatalf("greedy body\n got %s\nwant %s", got, want)
	}
}

func TestCompleteVariants(t *testing.T) {
	s, c := newTest(t)
	answer := ""
	s.Handle("/v1/completions", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		_, _ = w.Write([]byte(answer))
	})
	req := CompletionRequest{Model: "m", Prompt: []int{1}, MaxTokens: 4, Sampling: Neutral()}

	// Stop token id as an integer stop_reason; token_ids preferred.
	answer = `{"choices":[{"text":"a","finish_reason":"stop","stop_reason":151645,"token_ids":[5,151645],
		"logprobs":{"tokens":["token_id:5","token_id:151645"],"token_logprobs":[-1,-2],"text_offset":[0,1]}}]}`
	got, err := c.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got.StopTokenID == nil || *got.StopTokenID != 151645 || got.StopReason != "" || !slices.Equal(got.TokenIDs, []int{5, 151645}) {
		t.Fatalf("%+v", got)
	}
	// Null stop reason, length finish.
	answer = `{"choices":[{"text":"ab","finish_reason":"length","stop_reason":null,
		"logprobs":{"tokens":["token_id:5","token_id:6"],"token_logprobs":[-1,-2],"text_offset":[0,1]}}]}`
	got, err = c.Complete(context.Background(), req)
	if err != nil || got.FinishReason != "length" || got.StopReason != "" || got.StopTokenID != nil {
		t.Fatalf("%+v %v", got, err)
	}

	for name, bad := range map[string]string{
		`"ab" not in token_id`:   `{"choices":[{"text":"ab","logprobs":{"tokens":["ab"],"token_logprobs":[-1],"text_offset":[0]}}]}`,
		"token_ids has 1":        `{"choices":[{"text":"ab","token_ids":[1],"logprobs":{"tokens":["token_id:1","token_id:2"],"token_logprobs":[-1,-1],"text_offset":[0,1]}}]}`,
		"no choices":             `{"choices":[]}`,
		"no logprobs":            `{"choices":[{"text":"x","logprobs":null}]}`,
		"1 token logprobs for 2": `{"choices":[{"text":"ab","logprobs":{"tokens":["token_id:1","token_id:2"],"token_logprobs":[-1],"text_offset":[0,1]}}]}`,
	} {
		answer = bad
		_, err := c.Complete(context.Background(), req)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), s.URL) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestScore(t *testing.T) {
	s, c := newTest(t)
	s.Handle("/v1/completions", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		_, _ = w.Write([]byte(`{"choices":[{"text":"x","prompt_logprobs":[null,
			{"20":{"logprob":-1.5,"rank":3,"decoded_token":"b"},"7":{"logprob":-0.1,"rank":1,"decoded_token":"z"}},
			{"30":{"logprob":-0.25,"rank":1,"decoded_token":"c"}}]}]}`))
	})
	got, err := c.Score(context.Background(), "ref", []int{10, 20, 30})
	if err != nil {
		t.Fatal(err)
	}
	// Scoring sends every sampling field too (Greedy), byte for byte.
	if got, want := string(lastBody(t, s, "/v1/completions")), `{"model":"ref","prompt":[10,20,30],"max_tokens":1,`+
		`"temperature":0,"top_p":1,"top_k":-1,"min_p":0,"repetition_penalty":1,"presence_penalty":0,"frequency_penalty":0,`+
		`"n":1,"prompt_logprobs":0}`; got != want {
		t.Fatalf("score body\n got %s\nwant %s", got, want)
	}
	if len(got) != 3 || got[0] != 0 || got[1] != -1.5 || got[2] != -0.25 {
		t.Fatalf("%v", got)
	}
	_, err = c.Score(context.Background(), "ref", []int{10, 21, 30})
	if err == nil || !strings.Contains(err.Error(), "token 21 at position 1") {
		t.Fatalf("err %v", err)
	}
	_, err = c.Score(context.Background(), "ref", []int{10, 20})
	if err == nil || !strings.Contains(err.Error(), "3 prompt logprobs for 2 tokens") {
		t.Fatalf("err %v", err)
	}
}

func TestTokenize(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/tokenize", 200, map[string]any{"count": 3, "max_model_len": 32768, "tokens": []int{4, 5, 6}})
	got, err := c.Tokenize(context.Background(), "m", "hello there", false)
	if err != nil || !slices.Equal(got, []int{4, 5, 6}) {
		t.Fatalf("%v %v", got, err)
	}
	fake.AssertJSON(t, lastBody(t, s, "/tokenize"), `{"model":"m","prompt":"hello there","add_special_tokens":false}`)
	got, err = c.TokenizeChat(context.Background(), "m", []Message{{Role: "user", Content: "q?"}}, true)
	if err != nil || !slices.Equal(got, []int{4, 5, 6}) {
		t.Fatalf("%v %v", got, err)
	}
	fake.AssertJSON(t, lastBody(t, s, "/tokenize"), `{"model":"m","messages":[{"role":"user","content":"q?"}],"add_generation_prompt":true,"continue_final_message":false,"add_special_tokens":false}`)
}

func TestLoRA(t *testing.T) {
	s, c := newTest(t)
	s.Handle("/v1/load_lora_adapter", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		_, _ = w.Write([]byte("Success: LoRA adapter 'step-3' added successfully."))
	})
	s.Handle("/v1/unload_lora_adapter", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		_, _ = w.Write([]byte("Success: LoRA adapter 'step-3' removed successfully."))
	})
	if err := c.LoadLoRA(context.Background(), "step-3", "/runs/a/step-3"); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, lastBody(t, s, "/v1/load_lora_adapter"), `{"lora_name":"step-3","lora_path":"/runs/a/step-3"}`)
	if err := c.UnloadLoRA(context.Background(), "step-3"); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, lastBody(t, s, "/v1/unload_lora_adapter"), `{"lora_name":"step-3"}`)

	// Adapter missing: vLLM's own 404 is a plain error.
	s.FailNext("/v1/load_lora_adapter", 1, 404, nil, `{"object":"error","message":"No adapter found for /x","type":"NotFoundError","code":404}`)
	err := c.LoadLoRA(context.Background(), "x", "/x")
	var se *transport.StatusError
	if !errors.As(err, &se) || se.Status != 404 || strings.Contains(err.Error(), "disabled") {
		t.Fatalf("err %v", err)
	}
}

func TestLoRADisabled(t *testing.T) {
	for _, st := range []int{404, 405} {
		s, c := newTest(t)
		body := `{"detail":"Not Found"}`
		if st == 405 {
			body = `{"detail":"Method Not Allowed"}`
		}
		s.FailNext("", 1, st, nil, body)
		err := c.LoadLoRA(context.Background(), "a", "/a")
		if err == nil || !strings.Contains(err.Error(), "--enable-lora") || !strings.Contains(err.Error(), "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True") {
			t.Fatalf("%d: err %v", st, err)
		}
	}
}

func TestHealthAndModels(t *testing.T) {
	s, c := newTest(t)
	s.Handle("/health", func(w http.ResponseWriter, _ *http.Request, _ []byte) {})
	s.HandleJSON("/v1/models", 200, map[string]any{"object": "list", "data": []any{
		map[string]any{"id": "Qwen/Qwen2.5-3B-Instruct", "object": "model"},
		map[string]any{"id": "step-3", "object": "model", "parent": "Qwen/Qwen2.5-3B-Instruct"},
	}})
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := s.Requests("/health"); len(r) != 1 || r[0].Method != http.MethodGet {
		t.Fatalf("%v", r)
	}
	got, err := c.Models(context.Background())
	if err != nil || len(got) != 2 || got[0] != "Qwen/Qwen2.5-3B-Instruct" || got[1] != "step-3" {
		t.Fatalf("%v %v", got, err)
	}
	s.FailNext("/health", 1, 501, nil, "dead")
	if err := c.Health(context.Background()); !transport.IsStatus(err, 501) {
		t.Fatalf("err %v", err)
	}
	if c.URL() != s.URL {
		t.Fatalf("url %q", c.URL())
	}
}

// vLLM's answers to an add_lora that fails in the engine, in both versions
// (entrypoints/openai/models/serving.py): 400 BadRequestError with the
// engine's text @4fe45004, 500 InternalServerError @00153c8b; "No adapter
// found" is 404 in both. None is a load that took or a missing route; the
// 400 and 404 are sent once, the 500 is retried by the transport.
func TestLoadLoRAEngineFailuresOfBothVLLMVersions(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		sends  int
	}{
		{400, `{"error":{"message":"Invalid LoRA adapter: rank 64 is greater than max_lora_rank 32.","type":"BadRequestError","code":400}}`, 1},
		{404, `{"error":{"message":"Loading lora a failed: No adapter found for /w/a","type":"NotFoundError","code":404}}`, 1},
		{500, `{"error":{"message":"Invalid LoRA adapter: rank 64 is greater than max_lora_rank 32.","type":"InternalServerError","code":500}}`, 0},
	} {
		s, c := newTest(t)
		s.Handle("/v1/load_lora_adapter", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		})
		err := c.LoadLoRA(context.Background(), "a", "/w/a")
		if err == nil || AlreadyLoaded(err) || errors.Is(err, ErrLoRADisabled) || ReplicaDown(err) || !strings.Contains(err.Error(), strconv.Itoa(tc.status)) {
			t.Errorf("status %d: %v, want a failed load", tc.status, err)
		}
		n := len(s.Requests("/v1/load_lora_adapter"))
		if tc.sends > 0 && n != tc.sends || tc.sends == 0 && n < 2 {
			t.Errorf("status %d: sent %d times", tc.status, n)
		}
		if got := string(lastBody(t, s, "/v1/load_lora_adapter")); got != `{"lora_name":"a","lora_path":"/w/a"}` {
			t.Errorf("body %s", got)
		}
	}
}
