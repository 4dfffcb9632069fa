package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"
)

func TestCompletionBodyEncodeEqualsMarshal(t *testing.T) {
	seed := int64(-42)
	for _, b := range []completionBody{
		{Model: "m", Prompt: []int{1, 2, 3}, MaxTokens: 500, Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1, Seed: &seed, N: 1,
			Stop: []string{"</search>", "</answer>"}, IncludeStopStrInOutput: true, Logprobs: 1, ReturnTokensAsTokenIDs: true},
		{Model: "m", Prompt: []int{4}, MaxTokens: 16, Temperature: 0.7, TopP: 0.8, TopK: 20, MinP: 0.05, RepetitionPenalty: 1.05,
			PresencePenalty: -2, FrequencyPenalty: 1e-7, Stop: []string{}, N: 1},
		{Model: "we\"ird\u2028<m>&", Prompt: []int{0}, Temperature: 0.7, TopP: 0.95, TopK: 50, Stop: []string{}, N: 1},
		{Model: "m", Prompt: []int{math.MaxInt32, 7}, Temperature: 1e-9, TopP: 1, Stop: []string{"\n\t\\"}},
		{Model: "m\xff\u2029", Prompt: []int{-3}, Temperature: 1e21, TopP: 123456.789, TopK: 0, Stop: []string{"<a&b>", "\x00\x1f\x7f"}},
	} {
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := b.encode(); err != nil || !bytes.Equal(got, want) {
			t.Errorf("encode: %v\n%s\nwant\n%s", err, got, want)
		}
	}
	// Values JSON cannot carry are an error, as for json.Marshal.
	for _, b := range []completionBody{{Model: "m", Prompt: []int{1}, Temperature: math.NaN()}, {Model: "m", Prompt: []int{1}, TopP: math.Inf(1)},
		{Model: "m", Prompt: []int{1}, MinP: math.NaN()}, {Model: "m", Prompt: []int{1}, RepetitionPenalty: math.Inf(1)},
		{Model: "m", Prompt: []int{1}, PresencePenalty: math.Inf(-1)}, {Model: "m", Prompt: []int{1}, FrequencyPenalty: math.NaN()}} {
		if _, err := json.Marshal(b); err == nil {
			t.Fatal("json.Marshal took a non-finite value")
		}
		if got, err := b.encode(); err == nil {
			t.Errorf("encode took a non-finite value: %s", got)
		}
	}
}

func TestDecodeTokens(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []int
		err  bool
	}{
		{`{"count":3,"max_model_len":32768,"tokens":[5,0,123456],"token_strs":null}`, []int{5, 0, 123456}, false},
		{`{"count":0,"tokens":[]}`, []int{}, false},
		{`{"tokens": [ 1 , 2 ]}`, []int{1, 2}, false},
		// Shapes the scanner leaves to encoding/json.
		{`{"tokens":[1,2],"nested":{"tokens":[9]}}`, nil, true}, // a nested "tokens" is not an int array of the top object: json fails? no: it decodes the top one
		{`{"tokens":[-1,2]}`, []int{-1, 2}, false},
		{`{"tokens":[1.5]}`, nil, true},
		{`{"count":1}`, nil, true},
		{`{"tokens":[1,2]`, nil, true},
		{`not json`, nil, true},
	} {
		got, err := decodeTokens([]byte(tc.raw))
		if tc.raw == `{"tokens":[1,2],"nested":{"tokens":[9]}}` {
			// Two "tokens" keys: the fallback decodes the top-level one.
			if err != nil || !reflect.DeepEqual(got, []int{1, 2}) {
				t.Errorf("%s: %v %v", tc.raw, got, err)
			}
			continue
		}
		if (err != nil) != tc.err || (!tc.err && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("%s: got %v, %v", tc.raw, got, err)
		}
	}
}

func FuzzDecodeTokens(f *testing.F) {
	f.Add([]byte(`{"count":2,"tokens":[1,2]}`))
	f.Add([]byte(`{"tokens":[ ]}`))
	f.Add([]byte(`{"tokens":[99999999999999]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := decodeTokens(raw)
		if err != nil {
			return
		}
		// Whatever the fast path accepts, encoding/json reads the same.
		var resp tokenizeResponse
		if json.Unmarshal(raw, &resp) == nil && resp.Tokens != nil && !reflect.DeepEqual(got, resp.Tokens) {
			t.Fatalf("%q: fast %v, json %v", raw, got, resp.Tokens)
		}
	})
}

// A PromptCache gives the same bodies as encoding each afresh: for prompts
// that grow, for a resend, and for prompts that do not extend the cached
// one; and no body shares memory with the cache.
func TestPromptCacheBodiesEqualFresh(t *testing.T) {
	seed := int64(7)
	base := completionBody{Model: "m", MaxTokens: 500, Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1.05, Seed: &seed, N: 1,
		Stop: []string{"</search>"}, IncludeStopStrInOutput: true, Logprobs: 1, ReturnTokensAsTokenIDs: true}
	prompt := []int{151644, 8948, 198}
	var pc PromptCache
	pc.CopyFrom(EncodePrompt("m", prompt)) // as a group's trajectories start
	if pc.Empty() || !EncodePrompt("m", nil).Empty() {
		t.Fatal("Empty")
	}
	check := func(what string, b completionBody) {
		t.Helper()
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.encodeWith(&pc)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %v\n%s\nwant\n%s", what, err, got, want)
		}
		for i := range got {
			got[i] = 'X' // the transport owns the body: the cache must not see this
		}
	}
	for turn := range 6 {
		b := base
		b.Prompt = prompt
		check(fmt.Sprintf("turn %d", turn), b)
		check(fmt.Sprintf("turn %d again", turn), b) // a failover resends it
		for k := range turn*3 + 1 {
			prompt = append(prompt, k*37+turn)
		}
	}
	b := base
	b.Prompt = prompt[:3] // shorter
	check("shorter", b)
	b.Prompt = append([]int{9}, prompt[1:]...) // another first id
	check("other start", b)
	b.Model = "other"
	check("other model", b)
	b.Prompt = []int{-1}
	check("one negative id", b)
	b.Prompt = []int{-1, 5, -6}
	check("grown from a negative id", b)
}

// FuzzCompletionBodyEncode holds the hand-written encoder to encoding/json
// for any sampling values (and the same error for those JSON cannot carry).
func FuzzCompletionBodyEncode(f *testing.F) {
	f.Add("m", 1, 500, 1.0, 1.0, -1, 0.0, 1.0, 0.0, 0.0, int64(7), "</search>")
	f.Add("we\"ird", 151643, 16, 0.7, 0.8, 20, 0.05, 1.05, -2.0, 2.0, int64(-1), "")
	f.Add("m", 0, 1, 1e-9, 1e21, 0, 1e-7, 123456.789, math.Inf(1), math.NaN(), int64(0), "<a&b>")
	f.Fuzz(func(t *testing.T, model string, id, maxTokens int, temp, topP float64, topK int, minP, rep, pres, freq float64, seed int64, stop string) {
		b := completionBody{Model: model, Prompt: []int{id, id + 1}, MaxTokens: maxTokens, Temperature: temp, TopP: topP, TopK: topK,
			MinP: minP, RepetitionPenalty: rep, PresencePenalty: pres, FrequencyPenalty: freq, Seed: &seed, N: 1, Stop: []string{stop}}
		want, werr := json.Marshal(b)
		got, gerr := b.encode()
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("json.Marshal error %v, encode error %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("encode\n%s\nwant\n%s", got, want)
		}
	})
}
