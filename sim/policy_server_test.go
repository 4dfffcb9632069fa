package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/sim/internal/httpx"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// newPolicy starts a simulated policy server over httptest.
func newPolicy(t *testing.T, f *fixture) (*PolicyServer, apiClient) {
	t.Helper()
	ps := NewPolicyServer(f.model, testBase)
	srv := httptest.NewServer(ps.Handler())
	t.Cleanup(srv.Close)
	return ps, apiClient{T: t, Base: srv.URL}
}

// completion is the decoded part of a completions answer the tests read.
type completion struct {
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason string  `json:"finish_reason"`
		StopReason   *string `json:"stop_reason"`
		TokenIDs     []int   `json:"token_ids"`
		PromptIDs    []int   `json:"prompt_token_ids"`
		Logprobs     *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []float64            `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func complete(t *testing.T, c apiClient, req map[string]any) completion {
	t.Helper()
	if _, ok := req["model"]; !ok {
		req["model"] = testBase
	}
	raw, _ := json.Marshal(req)
	resp, err := http.Post(c.Base+"/v1/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completions: %d %s", resp.StatusCode, b)
	}
	if resp.Header.Get(httpx.SimulatorHeader) != "true" {
		t.Errorf("completions: no %s header", httpx.SimulatorHeader)
	}
	var out completion
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.SystemFingerprint != Fingerprint {
		t.Errorf("system_fingerprint %q, want %q", out.SystemFingerprint, Fingerprint)
	}
	return out
}

// TestPolicyCompletionsFields checks the vLLM request fields the
// orchestrator uses.
func TestPolicyCompletionsFields(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	prompt := promptText(f.hotpot[2].Q, "")
	ids := f.tk.Encode(prompt)

	// max_tokens defaults to 16 (a turn is longer).
	out := complete(t, c, map[string]any{"prompt": prompt, "seed": 1})
	if ch := out.Choices[0]; out.Usage.CompletionTokens != 16 || ch.FinishReason != "length" || ch.Logprobs != nil {
		t.Errorf("default max_tokens: %d tokens, finish %q, logprobs %v", out.Usage.CompletionTokens, ch.FinishReason, ch.Logprobs)
	}
	if out.Usage.PromptTokens != len(ids) || out.Usage.TotalTokens != len(ids)+16 {
		t.Errorf("usage %+v, prompt has %d tokens", out.Usage, len(ids))
	}
	// A string prompt and its token ids give the same answer for a seed.
	byIDs := complete(t, c, map[string]any{"prompt": ids, "seed": 1})
	if byIDs.Choices[0].Text != out.Choices[0].Text {
		t.Errorf("prompt as ids: %q, as text: %q", byIDs.Choices[0].Text, out.Choices[0].Text)
	}

	base := func() map[string]any {
		return map[string]any{"prompt": ids, "max_tokens": 500, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "seed": 7,
			"stop": format.StopStrings, "logprobs": 0, "return_token_ids": true, "include_stop_str_in_output": true}
	}
	// n > 1: n choices, indexed, usage summed; the same seed repeats.
	req := base()
	req["n"] = 6
	many := complete(t, c, req)
	if len(many.Choices) != 6 {
		t.Fatalf("n=6: %d choices", len(many.Choices))
	}
	total, texts := 0, map[string]bool{}
	for i, ch := range many.Choices {
		if ch.Index != i {
			t.Errorf("choice %d has index %d", i, ch.Index)
		}
		total += len(ch.TokenIDs)
		texts[ch.Text] = true
		if !slices.Equal(ch.PromptIDs, ids) {
			t.Errorf("prompt_token_ids differ from the prompt")
		}
	}
	if total != many.Usage.CompletionTokens {
		t.Errorf("usage.completion_tokens %d, choices hold %d", many.Usage.CompletionTokens, total)
	}
	if len(texts) < 2 {
		t.Errorf("n=6 gave one text 6 times: %v", texts)
	}
	again := complete(t, c, req)
	for i := range many.Choices {
		if again.Choices[i].Text != many.Choices[i].Text {
			t.Errorf("seed 7 choice %d: %q then %q", i, many.Choices[i].Text, again.Choices[i].Text)
		}
	}

	for _, ch := range many.Choices {
		lp := ch.Logprobs
		if lp == nil || len(lp.Tokens) != len(ch.TokenIDs) || len(lp.TokenLogprobs) != len(ch.TokenIDs) || len(lp.TextOffset) != len(ch.TokenIDs) {
			t.Fatalf("logprobs %+v for %d tokens", lp, len(ch.TokenIDs))
		}
		// Each token's string is the token decoded alone; text_offset
		// adds up their lengths (vLLM's arithmetic); the text is where
		// they lead, cut at the stop string.
		var joined strings.Builder
		for j, id := range ch.TokenIDs {
			piece, _ := f.tk.DecodeText([]int{id}, false)
			if lp.Tokens[j] != piece || lp.TextOffset[j] != utf8.RuneCountInString(joined.String()) {
				t.Errorf("token %d %q at offset %d, want %q at %d", j, lp.Tokens[j], lp.TextOffset[j], piece, utf8.RuneCountInString(joined.String()))
			}
			joined.WriteString(piece)
			if lp.TopLogprobs[j][piece] != lp.TokenLogprobs[j] {
				t.Errorf("top_logprobs %v, token logprob %v", lp.TopLogprobs[j], lp.TokenLogprobs[j])
			}
		}
		if !strings.HasPrefix(joined.String(), ch.Text) {
			t.Errorf("tokens %q do not start with the text %q", joined.String(), ch.Text)
		}
		if ch.FinishReason != "stop" || ch.StopReason == nil || !strings.HasSuffix(ch.Text, *ch.StopReason) {
			t.Errorf("finish %q stop %v text %q", ch.FinishReason, ch.StopReason, ch.Text)
		}
		// The reported logprobs are the model's, token by token.
		score := f.model.Score(lm.InitialParams(), concat(ids, ch.TokenIDs))
		for j := range ch.TokenIDs {
			if math.Abs(score[len(ids)+j]-lp.TokenLogprobs[j]) > 1e-9 {
				t.Errorf("token %d: reported %v, Score %v", j, lp.TokenLogprobs[j], score[len(ids)+j])
			}
		}
	}

	// return_tokens_as_token_ids.
	req = base()
	req["return_tokens_as_token_ids"] = true
	asIDs := complete(t, c, req).Choices[0]
	for j, tok := range asIDs.Logprobs.Tokens {
		if tok != "token_id:"+strconv.Itoa(asIDs.TokenIDs[j]) {
			t.Errorf("token %d: %q, want token_id:%d", j, tok, asIDs.TokenIDs[j])
		}
		if _, ok := asIDs.Logprobs.TopLogprobs[j][tok]; !ok {
			t.Errorf("top_logprobs %v lacks %q", asIDs.Logprobs.TopLogprobs[j], tok)
		}
	}

	// include_stop_str_in_output false trims the stop string.
	req = base()
	req["include_stop_str_in_output"] = false
	trimmed := complete(t, c, req).Choices[0]
	full := complete(t, c, base()).Choices[0]
	if trimmed.StopReason == nil || full.StopReason == nil || *trimmed.StopReason != *full.StopReason {
		t.Fatalf("stop reasons %v / %v", trimmed.StopReason, full.StopReason)
	}
	if strings.Contains(trimmed.Text, *trimmed.StopReason) || trimmed.Text+*full.StopReason != full.Text {
		t.Errorf("trimmed %q, full %q", trimmed.Text, full.Text)
	}
	if !slices.Equal(trimmed.TokenIDs, full.TokenIDs) {
		t.Errorf("trimming changed the token ids")
	}

	// Prompt logprobs: first entry null, then the model's scores.
	_, pl := promptLogprobs(t, c, testBase, ids)
	score := f.model.Score(lm.InitialParams(), ids)
	for i := 1; i < len(ids); i++ {
		if pl[i] != score[i] {
			t.Fatalf("prompt logprob %d: %v, Score %v", i, pl[i], score[i])
		}
	}

	// Greedy through the server: the same for every seed.
	g1 := complete(t, c, map[string]any{"prompt": ids, "max_tokens": 200, "temperature": 0, "seed": 1, "stop": format.StopStrings})
	g2 := complete(t, c, map[string]any{"prompt": ids, "max_tokens": 200, "temperature": 0, "seed": 2, "stop": format.StopStrings})
	if g1.Choices[0].Text != g2.Choices[0].Text {
		t.Errorf("greedy: %q vs %q", g1.Choices[0].Text, g2.Choices[0].Text)
	}
}

// TestPolicyRejects checks the policy server's request validation.
func TestPolicyRejects(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	for _, tc := range []struct {
		name string
		body map[string]any
		want int
	}{
		{"unknown model", map[string]any{"model": "nope", "prompt": "x"}, 404},
		{"empty prompt", map[string]any{"model": testBase, "prompt": ""}, 400},
		{"empty id list", map[string]any{"model": testBase, "prompt": []int{}}, 400},
		{"id out of range", map[string]any{"model": testBase, "prompt": []int{1, f.tk.VocabSize()}}, 400},
		{"negative id", map[string]any{"model": testBase, "prompt": []int{-1}}, 400},
		{"max_tokens 0", map[string]any{"model": testBase, "prompt": "x", "max_tokens": 0}, 400},
		{"n 0", map[string]any{"model": testBase, "prompt": "x", "n": 0}, 400},
		{"n 65", map[string]any{"model": testBase, "prompt": "x", "n": 65}, 400},
		{"prompt object", map[string]any{"model": testBase, "prompt": map[string]any{}}, 400},
		{"empty stop string", map[string]any{"model": testBase, "prompt": "x", "stop": []string{"</search>", ""}}, 400},
	} {
		st, body := c.Post("/v1/completions", tc.body)
		if st != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, st, body, tc.want)
		}
		if e, ok := body["error"].(map[string]any); !ok || e["message"] == "" {
			t.Errorf("%s: not an OpenAI error body: %v", tc.name, body)
		}
	}
	// A one-string stop is accepted, as in the OpenAI API.
	if st, body := c.Post("/v1/completions", map[string]any{"model": testBase, "prompt": "x", "stop": "</search>"}); st != 200 {
		t.Errorf("stop as a string: %d %v", st, body)
	}
}

// TestPolicyTokenizeDetokenize checks /tokenize (with and without the chat
// template) and /detokenize.
func TestPolicyTokenizeDetokenize(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	user := format.UserPrompt(f.hotpot[0].Q, "")
	tokens := func(body map[string]any) []int {
		t.Helper()
		st, out := c.Post("/tokenize", body)
		if st != 200 {
			t.Fatalf("tokenize %v: %d %v", body, st, out)
		}
		var ids []int
		for _, v := range out["tokens"].([]any) {
			ids = append(ids, int(v.(float64)))
		}
		if out["count"].(float64) != float64(len(ids)) || out["max_model_len"].(float64) <= 0 {
			t.Errorf("tokenize: count %v max_model_len %v for %d tokens", out["count"], out["max_model_len"], len(ids))
		}
		return ids
	}
	msgs := []map[string]string{{"role": "user", "content": user}}
	chat := tokens(map[string]any{"model": testBase, "messages": msgs, "add_generation_prompt": true})
	want := "<|im_start|>system\n" + lm.SystemPrompt + "<|im_end|>\n<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
	if got, _ := f.tk.Decode(chat); got != want {
		t.Errorf("chat tokenize decodes to %q, want %q", got, want)
	}
	if !slices.Equal(chat, f.tk.Encode(want)) {
		t.Error("chat tokens differ from Encode of the template")
	}
	if noGen := tokens(map[string]any{"model": testBase, "messages": msgs, "add_generation_prompt": false}); !slices.Equal(noGen, f.tk.Encode(strings.TrimSuffix(want, "<|im_start|>assistant\n"))) {
		t.Error("add_generation_prompt false still adds the assistant header")
	}
	plain := tokens(map[string]any{"model": testBase, "prompt": user, "add_special_tokens": true})
	if !slices.Equal(plain, f.tk.Encode(user)) {
		t.Error("plain prompt tokens differ from Encode")
	}
	if s, _ := f.tk.Decode(plain); strings.Contains(s, lm.TokIMStart) {
		t.Error("plain prompt got a chat template")
	}
	if st, _ := c.Post("/tokenize", map[string]any{"model": testBase, "prompt": "x", "messages": msgs}); st != 400 {
		t.Errorf("prompt and messages: %d, want 400", st)
	}
	if st, _ := c.Post("/tokenize", map[string]any{"model": testBase}); st != 400 {
		t.Errorf("neither prompt nor messages: %d, want 400", st)
	}
	if st, _ := c.Post("/tokenize", map[string]any{"model": "nope", "prompt": "x"}); st != 404 {
		t.Errorf("unknown model: %d, want 404", st)
	}
	st, out := c.Post("/detokenize", map[string]any{"model": testBase, "tokens": chat})
	if st != 200 || out["prompt"] != want {
		t.Errorf("detokenize: %d %v", st, out)
	}
	if st, _ := c.Post("/detokenize", map[string]any{"model": testBase, "tokens": []int{f.tk.VocabSize()}}); st != 400 {
		t.Errorf("detokenize out of range: %d, want 400", st)
	}
}

// TestPolicyLabelled checks that every answer of the policy server,
// errors and unknown routes included, carries the simulator header, and
// that bodies with a fingerprint name the simulator.
func TestPolicyLabelled(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/health", ""}, {"GET", "/v1/models", ""}, {"GET", "/metrics", ""}, {"GET", "/nope", ""},
		{"POST", "/v1/completions", `{"model":"` + testBase + `","prompt":"x","max_tokens":2}`},
		{"POST", "/v1/completions", `{`}, {"POST", "/tokenize", `{"prompt":"x"}`},
		{"POST", "/v1/load_lora_adapter", `{"lora_name":"a","lora_path":"/nonexistent"}`},
		{"POST", "/v1/unload_lora_adapter", `{"lora_name":"a"}`},
	} {
		req, _ := http.NewRequest(r.method, c.Base+r.path, strings.NewReader(r.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Header.Get(httpx.SimulatorHeader) != "true" {
			t.Errorf("%s %s (%d): no %s header", r.method, r.path, resp.StatusCode, httpx.SimulatorHeader)
		}
		if bytes.Contains(b, []byte("fingerprint")) || bytes.Contains(b, []byte("owned_by")) {
			if !bytes.Contains(b, []byte(Fingerprint)) {
				t.Errorf("%s %s: body without %q: %s", r.method, r.path, Fingerprint, b)
			}
		}
		switch r.path {
		case "/health":
			if resp.StatusCode != 200 || len(b) != 0 {
				t.Errorf("/health: %d %q", resp.StatusCode, b)
			}
		case "/metrics":
			if !bytes.Contains(b, []byte("vllm:num_requests_running")) {
				t.Errorf("/metrics: %s", b)
			}
		case "/v1/models":
			var m struct {
				Object string `json:"object"`
				Data   []struct {
					ID      string `json:"id"`
					OwnedBy string `json:"owned_by"`
				} `json:"data"`
			}
			if err := json.Unmarshal(b, &m); err != nil || m.Object != "list" || len(m.Data) != 1 || m.Data[0].ID != testBase || m.Data[0].OwnedBy != Fingerprint {
				t.Errorf("/v1/models: %s", b)
			}
		}
	}
}

// TestPolicyConcurrent runs requests in parallel (for -race).
func TestPolicyConcurrent(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	ids := f.tk.Encode(promptText(f.hotpot[1].Q, ""))
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			raw, _ := json.Marshal(map[string]any{"model": testBase, "prompt": ids, "max_tokens": 100, "n": 2, "seed": i,
				"stop": format.StopStrings, "logprobs": 1, "prompt_logprobs": 0})
			resp, err := http.Post(c.Base+"/v1/completions", "application/json", bytes.NewReader(raw))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// scanIDs reads token-id prompts exactly as encoding/json does, whenever
// it reads them at all.
func FuzzScanIDs(f *testing.F) {
	for _, s := range []string{"[]", "[1,2,3]", " [ 151644 , 8948 ]\n", "[01]", "[1.0]", "[1e3]", "[-0]", "[-5,7]", "[1,]", "[999999999999999999]", "[9999999999999999999]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := scanIDs(b, nil)
		if !ok {
			return
		}
		var want []int
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("scanIDs took %q, encoding/json: %v", b, err)
		}
		if !slices.Equal(got, want) || (got == nil) != (want == nil) {
			t.Fatalf("scanIDs(%q) = %v, want %v", b, got, want)
		}
	})
}

// vLLM's TokenizeChatRequest: add_generation_prompt is true when omitted,
// continue_final_message leaves the last message open, and the two
// together are refused with 400.
func TestSimPolicyTokenizeChatDefaultsLikeVLLM(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	msgs := []map[string]string{{"role": "user", "content": "q?"}}
	ids := func(body map[string]any) []int {
		t.Helper()
		st, out := c.Post("/tokenize", body)
		if st != 200 {
			t.Fatalf("tokenize %v: %d %v", body, st, out)
		}
		var ids []int
		for _, v := range out["tokens"].([]any) {
			ids = append(ids, int(v.(float64)))
		}
		return ids
	}
	withGen := ids(map[string]any{"model": testBase, "messages": msgs, "add_generation_prompt": true})
	if omitted := ids(map[string]any{"model": testBase, "messages": msgs}); !slices.Equal(omitted, withGen) {
		t.Error("omitted add_generation_prompt is not true")
	}
	open := ids(map[string]any{"model": testBase, "messages": msgs, "add_generation_prompt": false, "continue_final_message": true})
	if got, _ := f.tk.Decode(open); !strings.HasSuffix(got, "q?") {
		t.Errorf("continue_final_message: %q does not end in the open message", got)
	}
	if st, _ := c.Post("/tokenize", map[string]any{"model": testBase, "messages": msgs, "continue_final_message": true}); st != 400 {
		t.Errorf("continue_final_message with the default add_generation_prompt: %d, want 400", st)
	}
}

// vLLM's /v1/load_lora_adapter refuses in its own order and with its own
// statuses: missing fields and a name already loaded are 400
// InvalidUserInput, a directory without an adapter is 404 NotFoundError
// ("No adapter found"), an adapter that fails to load is 500; /v1/models
// then lists a loaded adapter with its path as root and the base model as
// parent.
func TestSimPolicyLoadLoRAFailsLikeVLLM(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	writeAdapter := func(weights []byte) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"peft_type": "LORA", "r": 8}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), weights, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	st, err := weights.EncodeSafetensors(lm.InitialParams())
	if err != nil {
		t.Fatal(err)
	}
	good, broken := writeAdapter(st), writeAdapter([]byte("not safetensors"))
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		typ    string
		msg    string
	}{
		{"no path", map[string]any{"lora_name": "a"}, 400, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided."},
		{"no adapter", map[string]any{"lora_name": "a", "lora_path": t.TempDir()}, 404, "NotFoundError", "No adapter found for"},
		{"broken adapter", map[string]any{"lora_name": "a", "lora_path": broken}, 400, "BadRequestError", "failed to load LoRA adapter 'a'"},
		{"loaded", map[string]any{"lora_name": "a", "lora_path": good}, 200, "", ""},
		{"loaded twice", map[string]any{"lora_name": "a", "lora_path": good}, 400, "InvalidUserInput", "has already been loaded"},
	} {
		st, out := c.Post("/v1/load_lora_adapter", tc.body)
		if st != tc.status {
			t.Errorf("%s: status %d %v, want %d", tc.name, st, out, tc.status)
			continue
		}
		if tc.typ != "" && (out["type"] != tc.typ || !strings.Contains(fmt.Sprint(out["message"]), tc.msg)) {
			t.Errorf("%s: %v, want type %s and %q", tc.name, out, tc.typ, tc.msg)
		}
	}
	_, models := c.Get("/v1/models")
	data := models["data"].([]any)
	if len(data) != 2 {
		t.Fatalf("/v1/models: %v", models)
	}
	if m := data[1].(map[string]any); m["id"] != "a" || m["root"] != good || m["parent"] != testBase {
		t.Errorf("adapter card %v, want id a, root %s, parent %s", m, good, testBase)
	}
}

// promptLogprobs scores ids with a policy server the way the orchestrator
// does: the sequence as the prompt, max_tokens 1, prompt_logprobs 0.
func promptLogprobs(t *testing.T, c apiClient, model string, ids []int) (int, []float64) {
	t.Helper()
	st, body := c.Post("/v1/completions", map[string]any{"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0,
		"prompt_logprobs": 0})
	if st != http.StatusOK {
		return st, nil
	}
	pl := body["choices"].([]any)[0].(map[string]any)["prompt_logprobs"].([]any)
	if len(pl) != len(ids) || pl[0] != nil {
		t.Fatalf("prompt_logprobs: %d entries (first %v) for %d tokens", len(pl), pl[0], len(ids))
	}
	out := make([]float64, len(ids))
	for i := 1; i < len(ids); i++ {
		e := pl[i].(map[string]any)[fmt.Sprint(ids[i])].(map[string]any)
		out[i] = e["logprob"].(float64)
	}
	return st, out
}
