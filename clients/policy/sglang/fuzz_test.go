package sglang

import (
	"math"
	"testing"
)

// Whatever DecodeGenerate accepts is a consistent sample: one finite-or-
// reported logprob per id, a known finish reason.
func FuzzDecodeGenerate(f *testing.F) {
	f.Add([]byte(cannedGenerate))
	f.Add([]byte(`{"text":"x","output_ids":[9],"meta_info":{"finish_reason":{"type":"length","length":1},"output_token_logprobs":[[-2,9,"x"]]}}`))
	f.Add([]byte(`{"text":"a","output_ids":[3,151645],"meta_info":{"finish_reason":{"type":"stop","matched":151645},"output_token_logprobs":[[-1,3,null],[-0.1,151645,null]]}}`))
	f.Add([]byte(`{"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop","matched":null},"output_token_logprobs":[[1e308,1]]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := DecodeGenerate(raw)
		if err != nil {
			return
		}
		if len(c.TokenIDs) != len(c.Logprobs) {
			t.Fatalf("%q: %d ids, %d logprobs", raw, len(c.TokenIDs), len(c.Logprobs))
		}
		if c.FinishReason != "stop" && c.FinishReason != "length" {
			t.Fatalf("%q: finish reason %q", raw, c.FinishReason)
		}
		if c.FinishReason == "length" && (c.StopReason != "" || c.StopTokenID != nil) {
			t.Fatalf("%q: a length finish with a stop", raw)
		}
	})
}

// Whatever DecodeScore accepts has one value per token, 0 first, none NaN.
func FuzzDecodeScore(f *testing.F) {
	f.Add([]byte(`{"meta_info":{"input_token_logprobs":[[null,1,null],[-0.5,2,null],[-1.5,3,null]]}}`), 3)
	f.Add([]byte(`{"meta_info":{"input_token_logprobs":[[-7,1,"a"],[-0.5,2,null],[-1.5,3,null]]}}`), 3)
	f.Add([]byte(`{"meta_info":{"input_token_logprobs":[[null,1]]}}`), 1)
	f.Fuzz(func(t *testing.T, raw []byte, n int) {
		if n < 1 || n > 8 {
			return
		}
		seq := make([]int, n)
		for i := range seq {
			seq[i] = i + 1
		}
		got, err := DecodeScore(raw, seq)
		if err != nil {
			return
		}
		if len(got) != n || got[0] != 0 {
			t.Fatalf("%q: %v", raw, got)
		}
		for _, v := range got {
			if math.IsNaN(v) {
				t.Fatalf("%q: NaN", raw)
			}
		}
	})
}
