package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/sim/internal/httpx"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// generated is the decoded part of a /generate answer the tests read.
type generated struct {
	Text      string `json:"text"`
	OutputIDs []int  `json:"output_ids"`
	Meta      struct {
		ID           string `json:"id"`
		FinishReason struct {
			Type    string          `json:"type"`
			Matched json.RawMessage `json:"matched"`
			Length  *int            `json:"length"`
		} `json:"finish_reason"`
		PromptTokens     int     `json:"prompt_tokens"`
		CompletionTokens int     `json:"completion_tokens"`
		Output           [][]any `json:"output_token_logprobs"`
		Input            [][]any `json:"input_token_logprobs"`
	} `json:"meta_info"`
}

// rawGenerate posts body to /generate and returns the status, the body
// and the answer's headers.
func rawGenerate(t *testing.T, base string, body any) (int, []byte, http.Header) {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(base+"/generate", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func generate(t *testing.T, c apiClient, body map[string]any) generated {
	t.Helper()
	st, b, h := rawGenerate(t, c.Base, body)
	if st != http.StatusOK {
		t.Fatalf("/generate: %d %s", st, b)
	}
	if h.Get(httpx.SimulatorHeader) != "true" {
		t.Errorf("/generate: no %s header", httpx.SimulatorHeader)
	}
	var g generated
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// lps returns the logprobs and ids of SGLang [logprob, id, text] entries.
func lps(t *testing.T, es [][]any) ([]any, []int) {
	t.Helper()
	var l []any
	var ids []int
	for _, e := range es {
		if len(e) != 3 || e[2] != nil {
			t.Fatalf("entry %v: want [logprob, id, null]", e)
		}
		l = append(l, e[0])
		ids = append(ids, int(e[1].(float64)))
	}
	return l, ids
}

// rolloutBodies are the vLLM and SGLang requests for the same rollout turn:
// every sampling field explicit, the stop string kept, special tokens kept.
func rolloutBodies(ids []int, seed int, temp, topP float64, topK int) (vllm, sglang map[string]any) {
	vllm = map[string]any{"prompt": ids, "max_tokens": 300, "temperature": temp, "top_p": topP, "top_k": topK, "min_p": 0.0,
		"repetition_penalty": 1.0, "seed": seed, "stop": format.StopStrings, "logprobs": 0, "return_token_ids": true,
		"include_stop_str_in_output": true, "skip_special_tokens": false}
	sglang = map[string]any{"input_ids": ids, "return_logprob": true, "sampling_params": map[string]any{
		"max_new_tokens": 300, "temperature": temp, "top_p": topP, "top_k": topK, "min_p": 0.0, "repetition_penalty": 1.0,
		"stop": format.StopStrings, "no_stop_trim": true, "skip_special_tokens": false, "sampling_seed": seed}}
	return vllm, sglang
}

// TestSimGenerateSameDrawsAsCompletions checks that /generate and
// /v1/completions draw the same ids, text and finish for the same sampling
// settings and seed (so a run through either route builds the same
// batches), and report the same logprobs at temperature 1.
func TestSimGenerateSameDrawsAsCompletions(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	ids := f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	stops := 0
	for seed := 1; seed <= 12; seed++ {
		for _, set := range []struct {
			temp, topP float64
			topK       int
		}{{1, 1, -1}, {0.7, 0.8, 20}, {0, 1, -1}} {
			vb, sb := rolloutBodies(ids, seed, set.temp, set.topP, set.topK)
			v := complete(t, c, vb).Choices[0]
			g := generate(t, c, sb)
			if !slices.Equal(g.OutputIDs, v.TokenIDs) || g.Text != v.Text {
				t.Fatalf("seed %d %+v: /generate %v %q, completions %v %q", seed, set, g.OutputIDs, g.Text, v.TokenIDs, v.Text)
			}
			l, outIDs := lps(t, g.Meta.Output)
			if !slices.Equal(outIDs, v.TokenIDs) || g.Meta.CompletionTokens != len(v.TokenIDs) || g.Meta.PromptTokens != len(ids) {
				t.Errorf("seed %d: output_token_logprobs ids %v, counts %d/%d", seed, outIDs, g.Meta.PromptTokens, g.Meta.CompletionTokens)
			}
			if set.temp == 1 || set.temp == 0 {
				for i := range l {
					if math.Abs(l[i].(float64)-v.Logprobs.TokenLogprobs[i]) > 1e-9 {
						t.Fatalf("seed %d T=%v token %d: logprob %v, completions %v", seed, set.temp, i, l[i], v.Logprobs.TokenLogprobs[i])
					}
				}
			}
			switch v.FinishReason {
			case "stop":
				if g.Meta.FinishReason.Type != "stop" {
					t.Errorf("finish %+v, completions stop", g.Meta.FinishReason)
				}
				if v.StopReason != nil {
					stops++
					if matchedStr(g) != *v.StopReason {
						t.Errorf("matched %s, completions stop_reason %q", g.Meta.FinishReason.Matched, *v.StopReason)
					}
				}
			case "length":
				if g.Meta.FinishReason.Type != "length" || g.Meta.FinishReason.Length == nil || *g.Meta.FinishReason.Length != 300 {
					t.Errorf("finish %+v, completions length", g.Meta.FinishReason)
				}
			}
		}
	}
	if stops == 0 {
		t.Fatal("no draw stopped at a stop string")
	}
}

// searchGeneration asks /generate for turns until one stops at </search>.
func searchGeneration(t *testing.T, f *fixture, c apiClient, noStopTrim bool) generated {
	t.Helper()
	ids := f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	for seed := 1; seed <= 40; seed++ {
		_, sb := rolloutBodies(ids, seed, 1, 1, -1)
		sb["sampling_params"].(map[string]any)["no_stop_trim"] = noStopTrim
		g := generate(t, c, sb)
		if matchedStr(g) == "</search>" {
			return g
		}
	}
	t.Fatal("no turn of 40 stopped at </search>")
	return generated{}
}

// TestSimGenerateTrimsStopUnlessNoStopTrim checks SGLang's stop handling:
// the matched stop string is cut from text unless no_stop_trim, while
// output_ids hold every sampled token either way (the last one, ">\n\n",
// runs past the stop string).
func TestSimGenerateTrimsStopUnlessNoStopTrim(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	kept := searchGeneration(t, f, c, true)
	trimmed := searchGeneration(t, f, c, false)
	if !strings.HasSuffix(kept.Text, "</search>") {
		t.Fatalf("no_stop_trim: text %q does not end with the stop string", kept.Text)
	}
	if trimmed.Text != strings.TrimSuffix(kept.Text, "</search>") || !slices.Equal(trimmed.OutputIDs, kept.OutputIDs) {
		t.Errorf("trimmed %q %v; kept %q %v", trimmed.Text, trimmed.OutputIDs, kept.Text, kept.OutputIDs)
	}
	last, _ := f.tk.ID(">\n\n")
	if kept.OutputIDs[len(kept.OutputIDs)-1] != last {
		t.Errorf("last output id %d, want >\\n\\n (%d)", kept.OutputIDs[len(kept.OutputIDs)-1], last)
	}
}

// TestSimGenerateStopTokenMatchedIsItsID checks a turn ended by
// <|im_end|> reports finish_reason {type: stop, matched: <its id>}, keeps
// the id in output_ids and its text only with no_stop_trim and
// skip_special_tokens false.
func TestSimGenerateStopTokenMatchedIsItsID(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	eos, _ := f.tk.ID(lm.TokIMEnd)
	ids := f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	for seed := 1; seed <= 60; seed++ {
		_, sb := rolloutBodies(ids, seed, 1, 1, -1)
		delete(sb["sampling_params"].(map[string]any), "stop") // run on to the end of the turn
		g := generate(t, c, sb)
		if string(g.Meta.FinishReason.Matched) != strings.TrimSpace(jsonInt(eos)) {
			continue
		}
		if g.OutputIDs[len(g.OutputIDs)-1] != eos || !strings.HasSuffix(g.Text, lm.TokIMEnd) {
			t.Fatalf("no_stop_trim: %q %v", g.Text, g.OutputIDs)
		}
		sb["sampling_params"].(map[string]any)["no_stop_trim"] = false
		if trimmed := generate(t, c, sb); trimmed.Text != strings.TrimSuffix(g.Text, lm.TokIMEnd) {
			t.Errorf("trimmed %q, kept %q", trimmed.Text, g.Text)
		}
		return
	}
	t.Fatal("no turn of 60 ended at <|im_end|>")
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// matchedStr is finish_reason.matched as a string ("" when not one).
func matchedStr(g generated) string {
	var s string
	_ = json.Unmarshal(g.Meta.FinishReason.Matched, &s)
	return s
}

// TestSimGenerateInputLogprobsFirstIsNull checks scoring through
// /generate: logprob_start_len 0 returns an entry per prompt token, the
// first with a null logprob and the others the prompt's logprobs (as
// vLLM's prompt_logprobs); -1 returns only the last prompt token's entry,
// null.
func TestSimGenerateInputLogprobsFirstIsNull(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	ids := f.tk.Encode(promptText(f.hotpot[2].Q, "") + "<think>a</think>")
	body := map[string]any{"input_ids": ids, "return_logprob": true, "logprob_start_len": 0,
		"sampling_params": map[string]any{"max_new_tokens": 1, "temperature": 0.0}}
	g := generate(t, c, body)
	l, inIDs := lps(t, g.Meta.Input)
	if !slices.Equal(inIDs, ids) || l[0] != nil {
		t.Fatalf("input_token_logprobs ids %v (want the prompt), first %v (want null)", inIDs, l[0])
	}
	want := f.model.Score(lm.InitialParams(), ids)
	for i := 1; i < len(ids); i++ {
		if math.Abs(l[i].(float64)-want[i]) > 1e-12 {
			t.Fatalf("position %d: %v, want %v", i, l[i], want[i])
		}
	}
	if len(g.OutputIDs) != 1 {
		t.Errorf("max_new_tokens 1: %d output ids", len(g.OutputIDs))
	}
	body["logprob_start_len"] = -1
	g = generate(t, c, body)
	if l, inIDs := lps(t, g.Meta.Input); len(l) != 1 || l[0] != nil || inIDs[0] != ids[len(ids)-1] {
		t.Errorf("logprob_start_len -1: %v", g.Meta.Input)
	}
}

// TestSimGenerateDefaultsLikeSGLang checks omitted sampling fields take
// SamplingParams' defaults (max_new_tokens 128, temperature 1, top_p 1,
// top_k all, skip_special_tokens true, no_stop_trim false), not the
// model's generation config that /v1/completions applies.
func TestSimGenerateDefaultsLikeSGLang(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	ids := f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	sawDiff := false
	for seed := 1; seed <= 8; seed++ {
		omitted := generate(t, c, map[string]any{"input_ids": ids, "sampling_params": map[string]any{"sampling_seed": seed}})
		explicit := generate(t, c, map[string]any{"input_ids": ids, "sampling_params": map[string]any{"sampling_seed": seed,
			"max_new_tokens": 128, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
			"skip_special_tokens": true, "no_stop_trim": false}})
		if !slices.Equal(omitted.OutputIDs, explicit.OutputIDs) || omitted.Text != explicit.Text {
			t.Fatalf("seed %d: omitted fields %v, SGLang's defaults %v", seed, omitted.OutputIDs, explicit.OutputIDs)
		}
		if omitted.Meta.FinishReason.Type == "length" && len(omitted.OutputIDs) != 128 {
			t.Errorf("length finish after %d tokens, want 128", len(omitted.OutputIDs))
		}
		if omitted.Meta.Output != nil || omitted.Meta.Input != nil {
			t.Errorf("return_logprob omitted: logprobs %v %v", omitted.Meta.Output, omitted.Meta.Input)
		}
		// The vLLM route with only the seed uses the generation config
		// (temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.05).
		gc := complete(t, c, map[string]any{"prompt": ids, "seed": seed, "max_tokens": 128, "return_token_ids": true})
		if !slices.Equal(gc.Choices[0].TokenIDs, omitted.OutputIDs) {
			sawDiff = true
		}
	}
	if !sawDiff {
		t.Error("the generation config never changed a draw: the test shows nothing")
	}
}

// TestSimGenerateReportsTemperatureScaledLogprobs checks /generate reports
// SGLang's default logprobs, log_softmax(logits / T), and the raw ones with
// SetOriginalLogprob (SGLANG_RETURN_ORIGINAL_LOGPROB); the draws are the
// same either way.
func TestSimGenerateReportsTemperatureScaledLogprobs(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	ids := f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	vb, sb := rolloutBodies(ids, 3, 1.5, 1, -1)
	v := complete(t, c, vb).Choices[0]
	scaled := generate(t, c, sb)
	ps.SetOriginalLogprob(true)
	orig := generate(t, c, sb)
	if !slices.Equal(scaled.OutputIDs, orig.OutputIDs) || !slices.Equal(orig.OutputIDs, v.TokenIDs) {
		t.Fatal("the logprob mode changed the draws")
	}
	ls, _ := lps(t, scaled.Meta.Output)
	lo, _ := lps(t, orig.Meta.Output)
	differ := 0
	for i := range lo {
		if math.Abs(lo[i].(float64)-v.Logprobs.TokenLogprobs[i]) > 1e-9 {
			t.Fatalf("original logprob %d: %v, raw %v", i, lo[i], v.Logprobs.TokenLogprobs[i])
		}
		if math.Abs(ls[i].(float64)-lo[i].(float64)) > 1e-9 {
			differ++
		}
		if ls[i].(float64) > 1e-12 {
			t.Fatalf("scaled logprob %v > 0", ls[i])
		}
	}
	if differ == 0 {
		t.Error("temperature 1.5: scaled logprobs equal the raw ones")
	}
}

// TestSimGenerateErrorsLikeSGLang checks SGLang's refusals: a ValueError is
// 400 {"error": {"message"}}; an unknown sampling_params key is an
// uncaught TypeError (500); an unknown top-level field is ignored and
// counted.
func TestSimGenerateErrorsLikeSGLang(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	ids := f.tk.Encode("hello")
	sp := func(kv ...any) map[string]any {
		m := map[string]any{"max_new_tokens": 4}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"input_ids": ids, "sampling_params": m}
	}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		msg    string
	}{
		{"no prompt", map[string]any{"sampling_params": map[string]any{}}, 400, "Either text, input_ids or input_embeds should be provided."},
		{"empty input_ids", map[string]any{"input_ids": []int{}}, 400, "input_ids cannot be empty."},
		{"top_k 0", sp("top_k", 0), 400, "top_k must be -1 (disable) or at least 1, got 0."},
		{"repetition_penalty 3", sp("repetition_penalty", 3.0), 400, "repetition_penalty must be in (0, 2]"},
		{"top_p 0", sp("top_p", 0.0), 400, "top_p must be in (0, 1], got 0."},
		{"negative temperature", sp("temperature", -1.0), 400, "temperature must be a non-negative finite number"},
		{"unknown lora", map[string]any{"input_ids": ids, "lora_path": "nope"}, 400, `Got LoRA adapter that has never been loaded: nope\nAll loaded adapters: dict_keys([]).`},
		{"unknown sampling key", sp("max_tokens", 4), 500, "Internal Server Error"},
	} {
		st, b, _ := rawGenerate(t, c.Base, tc.body)
		if st != tc.status || !strings.Contains(string(b), tc.msg) {
			t.Errorf("%s: %d %s, want %d %q", tc.name, st, b, tc.status, tc.msg)
			continue
		}
		if st == 400 {
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
				t.Errorf("%s: body %s is not {\"error\": {\"message\"}}", tc.name, b)
			}
		}
	}
	// A temperature above 2 (vLLM's bound) and text with input_ids are
	// accepted; input_ids wins.
	body := sp("temperature", 3.0, "sampling_seed", 1)
	body["text"] = "something else entirely"
	body["max_tokenz"] = 9
	st, b, h := rawGenerate(t, c.Base, body)
	if st != 200 {
		t.Fatalf("temperature 3 with text and input_ids: %d %s", st, b)
	}
	if h.Get(IgnoredFieldsHeader) != "max_tokenz" || ps.IgnoredFields()["POST /generate max_tokenz"] != 1 {
		t.Errorf("ignored %q %v", h.Get(IgnoredFieldsHeader), ps.IgnoredFields())
	}
	var g generated
	_ = json.Unmarshal(b, &g)
	if g.Meta.PromptTokens != len(ids) {
		t.Errorf("prompt_tokens %d, want input_ids' %d", g.Meta.PromptTokens, len(ids))
	}
}

// TestSimGenerateLoRAPathPicksLoadedAdapter checks SGLang's LoRA routes:
// /load_lora_adapter loads an adapter under a name ({success,
// error_message, loaded_adapters}; 400 with success false on failure),
// /generate with lora_path set to that name samples from it as the vLLM
// route does under the same name, and /unload_lora_adapter removes it.
func TestSimGenerateLoRAPathPicksLoadedAdapter(t *testing.T) {
	f := getFixture(t)
	ps, c := newPolicy(t, f)
	p := lm.InitialParams()
	for i := range p {
		p[i] += 0.3 * float64(i%7)
	}
	st, err := weights.EncodeSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"peft_type": "LORA", "r": 8}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), st, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := c.Post("/load_lora_adapter", map[string]any{"lora_name": "a", "lora_path": t.TempDir()}); code != 400 || out["success"] != false {
		t.Errorf("missing adapter: %d %v", code, out)
	}
	code, out := c.Post("/load_lora_adapter", map[string]any{"lora_name": "a", "lora_path": dir})
	if code != 200 || out["success"] != true || out["loaded_adapters"].(map[string]any)["a"] != dir {
		t.Fatalf("load: %d %v", code, out)
	}
	// SGLang's refusal of a name already loaded (lora/lora_manager.py).
	if code, out := c.Post("/load_lora_adapter", map[string]any{"lora_name": "a", "lora_path": dir}); code != 400 || out["success"] != false ||
		out["error_message"] != "Failed to load LoRA adapter a because it is already loaded" {
		t.Errorf("loaded twice: %d %v", code, out)
	}
	if _, ok := ps.Params("a"); !ok {
		t.Fatal("adapter a not served")
	}
	ids := f.tk.Encode(promptText(f.hotpot[2].Q, ""))
	vb, sb := rolloutBodies(ids, 5, 1, 1, -1)
	vb["model"], sb["lora_path"] = "a", "a"
	v := complete(t, c, vb).Choices[0]
	g := generate(t, c, sb)
	l, _ := lps(t, g.Meta.Output)
	if !slices.Equal(g.OutputIDs, v.TokenIDs) || math.Abs(l[0].(float64)-v.Logprobs.TokenLogprobs[0]) > 1e-9 {
		t.Errorf("lora_path a: %v, completions model a: %v", g.OutputIDs, v.TokenIDs)
	}
	if code, out := c.Post("/unload_lora_adapter", map[string]any{"lora_name": "a"}); code != 200 || out["success"] != true {
		t.Errorf("unload: %d %v", code, out)
	}
	if code, out := c.Post("/unload_lora_adapter", map[string]any{"lora_name": "a"}); code != 400 ||
		out["error_message"] != "LoRA with name a does not exist. Loaded LoRAs: dict_keys([])" {
		t.Errorf("unload twice: %d %v", code, out)
	}
	// An adapter loaded once is loaded again from its path when a request
	// names it (lora_ref_cache keeps it); a name never loaded is refused.
	if g := generate(t, c, sb); !slices.Equal(g.OutputIDs, v.TokenIDs) {
		t.Errorf("after unload: %v, want the adapter reloaded", g.OutputIDs)
	}
	sb["lora_path"] = "b"
	if st, b, _ := rawGenerate(t, c.Base, sb); st != 400 || !strings.Contains(string(b), `"Got LoRA adapter that has never been loaded: b\nAll loaded adapters: dict_keys(['a'])."`) {
		t.Errorf("never loaded: %d %s", st, b)
	}
}

// TestSimGenerateModelAndServerInfo checks /get_model_info's fields and
// that /get_server_info says it is simulated.
func TestSimGenerateModelAndServerInfo(t *testing.T) {
	f := getFixture(t)
	_, c := newPolicy(t, f)
	code, info := c.Get("/get_model_info")
	if code != 200 || info["model_path"] != testBase || info["is_generation"] != true || info["tokenizer_path"] != testBase {
		t.Errorf("/get_model_info: %d %v", code, info)
	}
	code, srv := c.Get("/get_server_info")
	if code != 200 || srv["simulated"] != Fingerprint {
		t.Errorf("/get_server_info: %d %v", code, srv)
	}
	for _, p := range []string{"/health", "/health_generate"} {
		resp, err := http.Get(c.Base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}

// TestSimGenerateFaultsInjected checks fault injection wraps /generate: a
// 503 fault limited to the route strikes it and not /v1/completions.
func TestSimGenerateFaultsInjected(t *testing.T) {
	f := getFixture(t)
	ps := NewPolicyServer(f.model, testBase)
	fy := NewFaulty(ps.Handler(), Faults{Rate: 1, Kinds: []string{"503"}, Routes: []string{"/generate"}})
	t.Cleanup(fy.Close)
	srv := httptest.NewServer(fy)
	t.Cleanup(srv.Close)
	ids := f.tk.Encode("hello")
	if st, b, _ := rawGenerate(t, srv.URL, map[string]any{"input_ids": ids, "sampling_params": map[string]any{"max_new_tokens": 2}}); st != 503 {
		t.Errorf("/generate under a 503 fault: %d %s", st, b)
	}
	complete(t, apiClient{T: t, Base: srv.URL}, map[string]any{"prompt": ids, "max_tokens": 2})
}
