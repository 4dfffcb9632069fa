package sglang

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/transport"
)

func newTest(t *testing.T) (*fake.Server, *Client) {
	t.Helper()
	s := fake.New(t)
	o := transport.DefaultOptions("policy", s.URL)
	o.Timeout = 2 * time.Second
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 2*time.Millisecond
	c, err := New(o, "Qwen/Qwen2.5-3B-Instruct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return s, c
}

func lastBody(t *testing.T, s *fake.Server, path string) string {
	t.Helper()
	r := s.Requests(path)
	if len(r) == 0 {
		t.Fatalf("no request to %s", path)
	}
	return string(r[len(r)-1].Body)
}

func answer(s *fake.Server, body string) {
	s.Handle("/generate", func(w http.ResponseWriter, _ *http.Request, _ []byte) { _, _ = w.Write([]byte(body)) })
}

const cannedGenerate = `{"text":" hi</search>","output_ids":[15,7,198],"meta_info":{"id":"r1",
 "finish_reason":{"type":"stop","matched":"</search>"},"prompt_tokens":3,"completion_tokens":3,"cached_tokens":0,
 "output_token_logprobs":[[-0.5,15,null],[-0.25,7,null],[-1.0,198,null]]}}`

// The sampling body names every field whose SGLang default would change
// what is sampled or returned, byte for byte.
func TestCompleteBody(t *testing.T) {
	s, c := newTest(t)
	answer(s, cannedGenerate)
	seed := int64(42)
	got, err := c.Complete(context.Background(), policy.CompletionRequest{
		Model: "lora-3", Prompt: []int{1, 2, 3}, MaxTokens: 500, Sampling: policy.Neutral(),
		Seed: &seed, Stop: []string{"</search>", "</answer>"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":500,"temperature":1,"top_p":1,"top_k":-1,"min_p":0,` +
		`"repetition_penalty":1,"presence_penalty":0,"frequency_penalty":0,"stop":["\u003c/search\u003e","\u003c/answer\u003e"],` +
		`"no_stop_trim":true,"skip_special_tokens":false,"sampling_seed":42},"return_logprob":true,"logprob_start_len":-1,` +
		`"top_logprobs_num":0,"return_text_in_logprobs":false,"stream":false,"lora_path":"lora-3"}`
	if b := lastBody(t, s, "/generate"); b != want {
		t.Fatalf("body\n%s\nwant\n%s", b, want)
	}
	wantC := &policy.Completion{Text: " hi</search>", TokenIDs: []int{15, 7, 198}, Logprobs: []float64{-0.5, -0.25, -1},
		FinishReason: "stop", StopReason: "</search>"}
	if !reflect.DeepEqual(got, wantC) {
		t.Fatalf("got %+v, want %+v", got, wantC)
	}
}

// The base model goes with lora_path null, no seed means no sampling_seed,
// and nil stop is an empty list (never SGLang's default).
func TestCompleteBaseModelNoSeed(t *testing.T) {
	s, c := newTest(t)
	answer(s, `{"text":"x","output_ids":[9],"meta_info":{"finish_reason":{"type":"length","length":1},"output_token_logprobs":[[-2,9,"x"]]}}`)
	g := policy.Greedy()
	got, err := c.Complete(context.Background(), policy.CompletionRequest{Model: "Qwen/Qwen2.5-3B-Instruct", Prompt: []int{5}, MaxTokens: 1, Sampling: g})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"input_ids":[5],"sampling_params":{"max_new_tokens":1,"temperature":0,"top_p":1,"top_k":-1,"min_p":0,` +
		`"repetition_penalty":1,"presence_penalty":0,"frequency_penalty":0,"stop":[],"no_stop_trim":true,"skip_special_tokens":false},` +
		`"return_logprob":true,"logprob_start_len":-1,"top_logprobs_num":0,"return_text_in_logprobs":false,"stream":false,"lora_path":null}`
	if b := lastBody(t, s, "/generate"); b != want {
		t.Fatalf("body\n%s\nwant\n%s", b, want)
	}
	if got.FinishReason != "length" || got.StopReason != "" || got.StopTokenID != nil {
		t.Fatalf("got %+v", got)
	}
}

// An EOS stop reports the matched token id.
func TestCompleteStopTokenID(t *testing.T) {
	s, c := newTest(t)
	answer(s, `{"text":"a","output_ids":[3,151645],"meta_info":{"finish_reason":{"type":"stop","matched":151645},"output_token_logprobs":[[-1,3,null],[-0.1,151645,null]]}}`)
	got, err := c.Complete(context.Background(), policy.CompletionRequest{Prompt: []int{1}, MaxTokens: 5, Sampling: policy.Neutral()})
	if err != nil {
		t.Fatal(err)
	}
	if got.StopTokenID == nil || *got.StopTokenID != 151645 || got.StopReason != "" {
		t.Fatalf("got %+v", got)
	}
}

// Answers that do not hold a consistent sample are errors naming the server.
func TestCompleteBadAnswers(t *testing.T) {
	for name, body := range map[string]string{
		"ids differ":     `{"text":"a","output_ids":[3],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[-1,4,null]]}}`,
		"count differs":  `{"text":"a","output_ids":[3,4],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[-1,3,null]]}}`,
		"null logprob":   `{"text":"a","output_ids":[3],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[null,3,null]]}}`,
		"no logprobs":    `{"text":"a","output_ids":[3],"meta_info":{"finish_reason":{"type":"length"}}}`,
		"no output_ids":  `{"text":"a","meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[]}}`,
		"abort":          `{"text":"","output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"x"},"output_token_logprobs":[]}}`,
		"no finish":      `{"text":"","output_ids":[],"meta_info":{"finish_reason":null,"output_token_logprobs":[]}}`,
		"no meta_info":   `{"text":"","output_ids":[]}`,
		"short entry":    `{"text":"a","output_ids":[3],"meta_info":{"finish_reason":{"type":"length"},"output_token_logprobs":[[-1]]}}`,
		"matched object": `{"text":"a","output_ids":[3],"meta_info":{"finish_reason":{"type":"stop","matched":{}},"output_token_logprobs":[[-1,3,null]]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			s, c := newTest(t)
			answer(s, body)
			_, err := c.Complete(context.Background(), policy.CompletionRequest{Prompt: []int{1}, MaxTokens: 5, Sampling: policy.Neutral()})
			if err == nil || !strings.Contains(err.Error(), s.URL) {
				t.Fatalf("err %v, want an error naming %s", err, s.URL)
			}
		})
	}
}

// Scoring sends the sequence with max_new_tokens 1, greedy unpenalised
// sampling and logprob_start_len 0, and reads input_token_logprobs.
func TestScoreBody(t *testing.T) {
	s, c := newTest(t)
	answer(s, `{"text":"z","output_ids":[0],"meta_info":{"finish_reason":{"type":"length","length":1},
	 "input_token_logprobs":[[null,1,null],[-0.5,2,null],[-1.5,3,null]],"output_token_logprobs":[[-0.1,0,null]]}}`)
	got, err := c.Score(context.Background(), "teacher", []int{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":1,"temperature":0,"top_p":1,"top_k":-1,"min_p":0,` +
		`"repetition_penalty":1,"presence_penalty":0,"frequency_penalty":0,"stop":[],"no_stop_trim":true,"skip_special_tokens":false},` +
		`"return_logprob":true,"logprob_start_len":0,"top_logprobs_num":0,"return_text_in_logprobs":false,"stream":false,"lora_path":"teacher"}`
	if b := lastBody(t, s, "/generate"); b != want {
		t.Fatalf("body\n%s\nwant\n%s", b, want)
	}
	if !reflect.DeepEqual(got, []float64{0, -0.5, -1.5}) {
		t.Fatalf("got %v", got)
	}
}

func TestScoreBadAnswers(t *testing.T) {
	for name, body := range map[string]string{
		"short":      `{"meta_info":{"input_token_logprobs":[[null,1,null],[-0.5,2,null]]}}`,
		"wrong id":   `{"meta_info":{"input_token_logprobs":[[null,1,null],[-0.5,2,null],[-1,4,null]]}}`,
		"null later": `{"meta_info":{"input_token_logprobs":[[null,1,null],[null,2,null],[-1,3,null]]}}`,
		"missing":    `{"meta_info":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			s, c := newTest(t)
			answer(s, body)
			if _, err := c.Score(context.Background(), "m", []int{1, 2, 3}); err == nil || !strings.Contains(err.Error(), s.URL) {
				t.Fatalf("err %v, want an error naming %s", err, s.URL)
			}
		})
	}
}

func TestTokenizeChatNeedsLocal(t *testing.T) {
	_, c := newTest(t)
	_, err := c.TokenizeChat(context.Background(), "m", nil, true)
	if !errors.Is(err, ErrNoChatTemplate) || !strings.Contains(err.Error(), "policy.tokenize: local") {
		t.Fatalf("err %v", err)
	}
}

func TestTokenizeBody(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/tokenize", 200, map[string]any{"tokens": []int{4, 5}, "count": 2})
	got, err := c.Tokenize(context.Background(), "m", "hi", false)
	if err != nil || !reflect.DeepEqual(got, []int{4, 5}) {
		t.Fatalf("got %v, %v", got, err)
	}
	fake.AssertJSON(t, []byte(lastBody(t, s, "/tokenize")), `{"model":"m","prompt":"hi","add_special_tokens":false}`)
}

func TestModelsJoinsModelInfoAndAdapters(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/get_model_info", 200, map[string]any{"model_path": "Qwen/Qwen2.5-3B-Instruct", "is_generation": true})
	s.HandleJSON("/v1/models", 200, map[string]any{"data": []map[string]any{{"id": "Qwen/Qwen2.5-3B-Instruct"}, {"id": "step-1", "parent": "Qwen/Qwen2.5-3B-Instruct"}}})
	got, err := c.Models(context.Background())
	if err != nil || !reflect.DeepEqual(got, []string{"Qwen/Qwen2.5-3B-Instruct", "step-1"}) {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestLoRARoutes(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/load_lora_adapter", 200, map[string]any{"success": true, "error_message": "", "loaded_adapters": map[string]string{"a": "/p"}})
	s.HandleJSON("/unload_lora_adapter", 200, map[string]any{"success": true})
	if err := c.LoadLoRA(context.Background(), "a", "/p"); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, []byte(lastBody(t, s, "/load_lora_adapter")), `{"lora_name":"a","lora_path":"/p","pinned":false}`)
	if err := c.UnloadLoRA(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, []byte(lastBody(t, s, "/unload_lora_adapter")), `{"lora_name":"a"}`)
	s.HandleJSON("/load_lora_adapter", 400, map[string]any{"success": false, "error_message": "LoRA is not enabled. Please set --enable-lora."})
	if err := c.LoadLoRA(context.Background(), "b", "/q"); !errors.Is(err, ErrLoRADisabled) {
		t.Fatalf("err %v, want ErrLoRADisabled", err)
	}
}

func TestLoRARouteMissing(t *testing.T) {
	_, c := newTest(t)
	if err := c.LoadLoRA(context.Background(), "a", "/p"); !errors.Is(err, ErrLoRADisabled) {
		t.Fatalf("err %v", err)
	}
}

func TestUpdateWeightsFromDisk(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/update_weights_from_disk", 200, map[string]any{"success": true, "message": "ok", "num_paused_requests": 0})
	if err := c.UpdateWeightsFromDisk(context.Background(), "/w/step-1"); err != nil {
		t.Fatal(err)
	}
	fake.AssertJSON(t, []byte(lastBody(t, s, "/update_weights_from_disk")), `{"model_path":"/w/step-1","load_format":"auto","abort_all_requests":false}`)
	s.HandleJSON("/update_weights_from_disk", 400, map[string]any{"success": false, "message": "no such file"})
	if err := c.UpdateWeightsFromDisk(context.Background(), "/w/x"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("err %v", err)
	}
}

func TestHealth(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/health", 200, nil)
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// SGLang's refusals of a retried load and of a request for an adapter a
// restarted replica lost, with its statuses and texts (lora/lora_manager.py,
// managers/tokenizer_manager.py _resolve_lora_path): the first is a load
// that took, the second a replica down.
func TestSGLangLoRARefusalsAreRecognised(t *testing.T) {
	s, c := newTest(t)
	s.HandleJSON("/load_lora_adapter", 400, map[string]any{"success": false,
		"error_message": "Failed to load LoRA adapter step-2 because it is already loaded", "loaded_adapters": map[string]string{"step-2": "/w/step-2"}})
	err := c.LoadLoRA(context.Background(), "step-2", "/w/step-2")
	if err == nil || !policy.AlreadyLoaded(err) || errors.Is(err, ErrLoRADisabled) {
		t.Errorf("already loaded: %v, want policy.AlreadyLoaded", err)
	}
	fake.AssertJSON(t, []byte(lastBody(t, s, "/load_lora_adapter")), `{"lora_name":"step-2","lora_path":"/w/step-2","pinned":false}`)
	s.HandleJSON("/generate", 400, map[string]any{"error": map[string]any{
		"message": "Got LoRA adapter that has never been loaded: step-2\nAll loaded adapters: dict_keys([])."}})
	_, err = c.Complete(context.Background(), policy.CompletionRequest{Model: "step-2", Prompt: []int{1, 2}, MaxTokens: 4, Sampling: policy.Neutral()})
	if err == nil || !policy.ReplicaDown(err) {
		t.Errorf("adapter never loaded: %v, want policy.ReplicaDown", err)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(lastBody(t, s, "/generate")), &body); err != nil || body["lora_path"] != "step-2" {
		t.Errorf("generate body %v (%v)", body, err)
	}
	// Another 400 is neither.
	s.HandleJSON("/generate", 400, map[string]any{"error": map[string]any{"message": "top_k must be -1 (disable) or at least 1, got 0."}})
	if _, err = c.Complete(context.Background(), policy.CompletionRequest{Model: "step-2", Prompt: []int{1, 2}, MaxTokens: 4, Sampling: policy.Neutral()}); policy.ReplicaDown(err) || policy.AlreadyLoaded(err) {
		t.Errorf("other refusal read as %v", err)
	}
}
