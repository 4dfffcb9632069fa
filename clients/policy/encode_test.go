package policy

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestCompletionBodyEncodeEqualsMarshal(t *testing.T) {
	seed := int64(-42)
	for _, b := range []completionBody{
		{Model: "m", Prompt: []int{1, 2, 3}, MaxTokens: 500, Temperature: 1, TopP: 1, TopK: -1, Seed: &seed, N: 1,
			Stop: []string{"</search>", "</answer>"}, IncludeStopStrInOutput: true, Logprobs: 1, ReturnTokensAsTokenIDs: true},
		{Model: "we\"ird\u2028<m>&", Prompt: []int{0}, Temperature: 0.7, TopP: 0.95, TopK: 50, Stop: []string{}, N: 1},
		{Model: "m", Prompt: []int{math.MaxInt32, 7}, Temperature: 1e-9, TopP: 1, Stop: []string{"\n\t\\"}},
	} {
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.encode(); !bytes.Equal(got, want) {
			t.Errorf("encode:\n%s\nwant\n%s", got, want)
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

// The completion scanner and encoding/json agree on every answer
// encoding/json accepts.
func FuzzDecodeCompletion(f *testing.F) {
	f.Add(cannedCompletion())
	f.Add([]byte(`{"choices":[{"text":"a\u00e9\"","finish_reason":null,"stop_reason":7,"token_ids":[1,2],"logprobs":{"tokens":["token_id:1","token_id:2"],"token_logprobs":[null,-1.5e-3],"text_offset":[0,1]}},{"text":"x"}]}`))
	f.Add([]byte(`{"Choices":[{"text":"a"}]}`))
	f.Add([]byte(`{"choices":[{"TEXT":"a","logprobs":null}],"choices":[{"text":"b"}]}`))
	f.Add([]byte(`{"choices":[{"text":"\xff"}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want completionResponse
		if json.Unmarshal(raw, &want) != nil {
			return
		}
		var got completionResponse
		if err := decodeCompletion(raw, &got); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		// Only the first choice is read by parseCompletion.
		if len(want.Choices) > 1 {
			want.Choices = want.Choices[:1]
		}
		if len(got.Choices) > 1 {
			got.Choices = got.Choices[:1]
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nscan %+v\njson %+v", raw, got, want)
		}
	})
}
