package sim

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/sim/lm"
)

// neutralFields are every sampling field a request can send, at the values
// that leave the model's distribution as it is.
func neutralFields() map[string]any {
	return map[string]any{"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
		"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
}

// turnRequest is a rollout-like request for prompt with every sampling
// field neutral, then set.
func turnRequest(prompt []int, seed int, set map[string]any) map[string]any {
	req := map[string]any{"prompt": prompt, "max_tokens": 80, "seed": seed, "stop": format.StopStrings,
		"include_stop_str_in_output": true, "logprobs": 0, "return_tokens_as_token_ids": true}
	for k, v := range neutralFields() {
		req[k] = v
	}
	for k, v := range set {
		if v == nil {
			delete(req, k)
		} else {
			req[k] = v
		}
	}
	return req
}

func tokenIDs(t *testing.T, out completion) []int {
	t.Helper()
	var ids []int
	for _, tok := range out.Choices[0].Logprobs.Tokens {
		id, err := parseTestTokenID(tok)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func parseTestTokenID(tok string) (int, error) {
	return strconv.Atoi(strings.TrimPrefix(tok, "token_id:"))
}

// A field a completion request omits takes the generation config's value
// (the same tokens as sending that value, seed for seed), and without one
// vLLM's built-in default; it is not the neutral value when the config
// says otherwise, so an omission changes what is sampled.
func TestSimPolicyOmittedSamplingFieldTakesTheGenerationConfig(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	temp, topP, topK, minP, rep := 0.7, 0.8, 2, 0.2, 1.3
	ps.SetGenerationConfig(lm.GenerationConfig{Temperature: &temp, TopP: &topP, TopK: &topK, MinP: &minP, RepetitionPenalty: &rep})
	prompts := [][]int{f.tk.Encode(promptText(f.hotpot[2].Q, "")), f.tk.Encode(promptText(f.hotpot[5].Q, ""))}
	configured := map[string]any{"temperature": temp, "top_p": topP, "top_k": topK, "min_p": minP, "repetition_penalty": rep,
		"presence_penalty": 0.0, "frequency_penalty": 0.0}
	for field, cfgValue := range configured {
		differs := false
		for _, prompt := range prompts {
			for seed := 1; seed <= 12; seed++ {
				omitted := tokenIDs(t, complete(t, c, turnRequest(prompt, seed, map[string]any{field: nil})))
				sent := tokenIDs(t, complete(t, c, turnRequest(prompt, seed, map[string]any{field: cfgValue})))
				if !slices.Equal(omitted, sent) {
					t.Fatalf("%s omitted: %v; sent as the config's %v: %v", field, omitted, cfgValue, sent)
				}
				if !slices.Equal(omitted, tokenIDs(t, complete(t, c, turnRequest(prompt, seed, nil)))) {
					differs = true
				}
			}
		}
		// The penalties are not in a generation config: omitted, they are 0.
		if fromConfig := field != "presence_penalty" && field != "frequency_penalty"; differs != fromConfig {
			t.Errorf("%s omitted: differs from neutral sampling %v, want %v", field, differs, fromConfig)
		}
	}
	// A model whose file sets nothing: an omitted field is vLLM's default.
	ps.SetGenerationConfig(lm.GenerationConfig{})
	for field := range configured {
		for seed := 1; seed <= 4; seed++ {
			omitted := tokenIDs(t, complete(t, c, turnRequest(prompts[0], seed, map[string]any{field: nil})))
			if neutral := tokenIDs(t, complete(t, c, turnRequest(prompts[0], seed, nil))); !slices.Equal(omitted, neutral) {
				t.Errorf("%s omitted without a config: %v, vLLM's default gives %v", field, omitted, neutral)
			}
		}
	}
}

// A completion request without max_tokens gets 16 tokens even when the
// generation config has max_new_tokens (vLLM's CompletionRequest defaults
// max_tokens to 16 before the config is read), and an explicit max_tokens
// is not capped by it.
func TestSimPolicyOmittedMaxTokensIs16WhateverTheGenerationConfig(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	five := 5
	gc := lm.QwenInstructGenerationConfig()
	gc.MaxNewTokens = &five
	ps.SetGenerationConfig(gc)
	prompt := promptText(f.hotpot[2].Q, "")
	if out := complete(t, c, map[string]any{"prompt": prompt, "seed": 1}); out.Usage.CompletionTokens != 16 {
		t.Errorf("max_tokens omitted: %d tokens, want 16", out.Usage.CompletionTokens)
	}
	if out := complete(t, c, map[string]any{"prompt": prompt, "seed": 1, "max_tokens": nil}); out.Usage.CompletionTokens != 16 {
		t.Errorf("max_tokens null: %d tokens, want 16", out.Usage.CompletionTokens)
	}
	if out := complete(t, c, map[string]any{"prompt": prompt, "seed": 1, "max_tokens": 30}); out.Usage.CompletionTokens <= 5 {
		t.Errorf("max_tokens 30: %d tokens, capped by max_new_tokens", out.Usage.CompletionTokens)
	}
}

// With every processing step on (penalties, temperature, min_p, top_k,
// top_p), the logprob reported for a sampled token is still the raw
// model's, as vLLM's default logprobs mode reports it.
func TestSimPolicyProcessedSamplingReportsRawLogprobs(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	prompt := f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	set := map[string]any{"temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.05, "repetition_penalty": 1.3,
		"presence_penalty": 0.5, "frequency_penalty": 0.5}
	for seed := 1; seed <= 8; seed++ {
		out := complete(t, c, turnRequest(prompt, seed, set))
		ids := tokenIDs(t, out)
		raw := f.model.Score(lm.InitialParams(), concat(prompt, ids))
		for j, lp := range out.Choices[0].Logprobs.TokenLogprobs {
			if want := raw[len(prompt)+j]; math.Abs(lp-want) > 1e-12 {
				t.Fatalf("seed %d token %d: reported %v, raw logprob %v", seed, j, lp, want)
			}
		}
	}
}

// Sampling values outside vLLM's ranges are refused with 400, the
// generation config's defaults included; greedy sampling takes n 1 only.
func TestSimPolicyRejectsSamplingOutsideVLLMsRanges(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	for _, bad := range []map[string]any{
		{"temperature": 2.5}, {"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -2},
		{"min_p": 1.5}, {"min_p": -0.1}, {"repetition_penalty": 0.0}, {"presence_penalty": 2.5}, {"frequency_penalty": -3.0},
		{"temperature": 0.0, "n": 2},
	} {
		req := map[string]any{"model": testBase, "prompt": "x", "max_tokens": 2}
		for k, v := range bad {
			req[k] = v
		}
		if st, body := c.Post("/v1/completions", req); st != http.StatusBadRequest {
			t.Errorf("%v: %d %s", bad, st, body)
		}
	}
	// top_k 0 and -1 both mean off.
	for _, k := range []int{0, -1} {
		if st, body := c.Post("/v1/completions", map[string]any{"model": testBase, "prompt": "x", "max_tokens": 2, "top_k": k}); st != http.StatusOK {
			t.Errorf("top_k %d: %d %s", k, st, body)
		}
	}
	// A generation config out of range fails the requests that omit the
	// field, as in vLLM.
	big := 3.0
	ps.SetGenerationConfig(lm.GenerationConfig{Temperature: &big})
	if st, _ := c.Post("/v1/completions", map[string]any{"model": testBase, "prompt": "x", "max_tokens": 2}); st != http.StatusBadRequest {
		t.Errorf("temperature 3 from the generation config: %d", st)
	}
	if st, _ := c.Post("/v1/completions", map[string]any{"model": testBase, "prompt": "x", "max_tokens": 2, "temperature": 1}); st != http.StatusOK {
		t.Errorf("temperature sent: %d", st)
	}
}

// judgeBody is a critique request for q with every sampling field neutral,
// then set.
func judgeBody(f *fixture, seed int, set map[string]any) map[string]any {
	q := f.hotpot[2]
	body := map[string]any{"model": "judge", "max_tokens": 300, "seed": seed,
		"messages": []map[string]string{{"role": "user", "content": judgePrompt(q.Q, q.Answers, thoughtAnswer+"<answer> unknown </answer>")}}}
	for k, v := range neutralFields() {
		body[k] = v
	}
	for k, v := range set {
		if v == nil {
			delete(body, k)
		} else {
			body[k] = v
		}
	}
	return body
}

func critiqueOf(t *testing.T, url string, body map[string]any) string {
	t.Helper()
	st, out, _ := judgeRequest(t, url, "", body)
	if st != 200 {
		t.Fatalf("judge: %d %v", st, out)
	}
	return out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
}

// A field a chat request omits takes the judge model's generation config
// value, as vLLM's chat completions do: an omitted temperature samples at
// Qwen2.5 instruct's 0.7 (the same critiques as sending 0.7, seed for
// seed), not greedily.
func TestSimJudgeOmittedSamplingFieldTakesTheGenerationConfig(t *testing.T) {
	f := getFixture(t)
	js := NewJudgeServer("judge", "", f.corpus)
	srv := httptest.NewServer(js.Handler())
	t.Cleanup(srv.Close)
	best := js.Critique(judgeBody(f, 0, nil)["messages"].([]map[string]string)[0]["content"])
	if n := len(js.Critiques(judgeBody(f, 0, nil)["messages"].([]map[string]string)[0]["content"])); n < 2 {
		t.Fatalf("the prompt has %d candidate critiques; want several", n)
	}
	others := 0
	for seed := 1; seed <= 40; seed++ {
		if c := critiqueOf(t, srv.URL, judgeBody(f, seed, map[string]any{"temperature": 0.0})); c != best {
			t.Fatalf("seed %d: greedy critique %q, want %q", seed, c, best)
		}
		omitted := critiqueOf(t, srv.URL, judgeBody(f, seed, map[string]any{"temperature": nil}))
		if sent := critiqueOf(t, srv.URL, judgeBody(f, seed, map[string]any{"temperature": 0.7})); omitted != sent {
			t.Fatalf("seed %d: temperature omitted %q, sent as 0.7 %q", seed, omitted, sent)
		}
		if omitted != best {
			others++
		}
		// top_p omitted is the config's 0.8, not 1.
		omitted = critiqueOf(t, srv.URL, judgeBody(f, seed, map[string]any{"top_p": nil}))
		if sent := critiqueOf(t, srv.URL, judgeBody(f, seed, map[string]any{"top_p": 0.8})); omitted != sent {
			t.Fatalf("seed %d: top_p omitted %q, sent as 0.8 %q", seed, omitted, sent)
		}
	}
	if others == 0 {
		t.Error("temperature omitted: every critique was the greedy one")
	}
}

// The judge's token cap is max_completion_tokens, else max_tokens, else the
// generation config's max_new_tokens, else the room in the context (vLLM's
// chat completions).
func TestSimJudgeTokenCapIsMaxCompletionTokensThenMaxTokensThenMaxNewTokens(t *testing.T) {
	f := getFixture(t)
	js := NewJudgeServer("judge", "", f.corpus)
	three := 3
	gc := lm.QwenInstructGenerationConfig()
	gc.MaxNewTokens = &three
	js.SetGenerationConfig(gc)
	srv := httptest.NewServer(js.Handler())
	t.Cleanup(srv.Close)
	// The cap counts Qwen2.5 tokens: a capped critique is its first
	// tokens, and says finish_reason "length".
	full := js.Critique(judgeBody(f, 0, nil)["messages"].([]map[string]string)[0]["content"])
	fullIDs := f.tk.Encode(full)
	for _, tc := range []struct {
		set  map[string]any
		want int
	}{
		{map[string]any{"temperature": 0.0, "max_tokens": 2, "max_completion_tokens": 5}, 5},
		{map[string]any{"temperature": 0.0, "max_tokens": 4}, 4},
		{map[string]any{"temperature": 0.0, "max_tokens": nil}, 3},
	} {
		st, out, _ := judgeRequest(t, srv.URL, "", judgeBody(f, 1, tc.set))
		if st != 200 {
			t.Fatalf("%v: %d %v", tc.set, st, out)
		}
		ch := out["choices"].([]any)[0].(map[string]any)
		got := ch["message"].(map[string]any)["content"].(string)
		usage := out["usage"].(map[string]any)
		if want, _ := f.tk.Decode(fullIDs[:tc.want]); got != want || ch["finish_reason"] != "length" || usage["completion_tokens"] != float64(tc.want) {
			t.Errorf("%v: %q, finish %v, usage %v; want %q cut by length", tc.set, got, ch["finish_reason"], usage, want)
		}
	}
	js.SetGenerationConfig(lm.QwenInstructGenerationConfig())
	st, out, _ := judgeRequest(t, srv.URL, "", judgeBody(f, 1, map[string]any{"temperature": 0.0, "max_tokens": nil}))
	ch := out["choices"].([]any)[0].(map[string]any)
	usage := out["usage"].(map[string]any)
	if st != 200 || ch["message"].(map[string]any)["content"] != full || ch["finish_reason"] != "stop" || usage["completion_tokens"] != float64(len(fullIDs)+1) {
		t.Errorf("no cap at all: %d %v %v, want the whole %q and its end-of-turn token", st, ch, usage, full)
	}
	prompt := lm.ChatTemplate([]lm.ChatMessage{{Role: "user", Content: judgeBody(f, 1, nil)["messages"].([]map[string]string)[0]["content"]}}, true)
	if usage["prompt_tokens"] != float64(len(f.tk.Encode(prompt))) {
		t.Errorf("prompt_tokens %v, the templated prompt has %d Qwen2.5 tokens", usage["prompt_tokens"], len(f.tk.Encode(prompt)))
	}
	if st, _, _ := judgeRequest(t, srv.URL, "", judgeBody(f, 1, map[string]any{"top_k": -5})); st != http.StatusBadRequest {
		t.Errorf("top_k -5: %d, want 400", st)
	}
}
