package policy

import (
	"reflect"
	"strings"
	"testing"
)

// Answers of the usual shapes read as expected.
func TestDecodeCompletionUsualAnswers(t *testing.T) {
	for _, raw := range []string{
		`{"choices":[{"text":"<search> a\n\"b\"\t\\ é </search>","finish_reason":"stop","stop_reason":"</search>","logprobs":{"tokens":["token_id:1","token_id:0"],"token_logprobs":[-0.5,-1e-3],"top_logprobs":[{"token_id:1":-0.5},{"token_id:0":-1E-3}],"text_offset":[0,3]}}]}`,
		` { "id" : "x" , "choices" : [ { "index" : 0 , "text" : "ab" , "finish_reason" : null , "stop_reason" : 151643 , "token_ids" : [ 7 , 8 ] , "logprobs" : { "tokens" : [ "token_id:7" , "token_id:8" ] , "token_logprobs" : [ 0 , -2.25 ] } } ] , "usage" : { "x" : [ true , false , null , -1.5e+2 , {} , [] ] } } `,
		`{"choices":[{"text":"\u00e9\ud83d\ude00","logprobs":{"tokens":[],"token_logprobs":[],"text_offset":[]},"stop_reason":null}]}`,
		`{"choices":[{"text":null,"logprobs":{"tokens":null,"token_logprobs":null}}]}`,
	} {
		if _, bad, err := decodeCompletion([]byte(raw)); err != nil || bad != nil {
			t.Errorf("%s: %v %v", raw, err, bad)
		}
	}
	c, bad, err := decodeCompletion(cannedCompletion())
	if err != nil || bad != nil || len(c.TokenIDs) != 40 || c.TokenIDs[39] != 1039 || c.Logprobs[0] != -0.123456789012345 || c.TextOffsets[39] != 156 || c.StopReason != "</search>" || c.FinishReason != "stop" {
		t.Fatalf("canned answer read as %+v, %v, %v", c, err, bad)
	}
	c, bad, err = decodeCompletion([]byte(`{"choices":[{"text":"ab","stop_reason":151643,"token_ids":[7,8],"logprobs":{"tokens":["token_id:7","token_id:8"],"token_logprobs":[0,-2.25]}}]}`))
	if err != nil || bad != nil || c.StopTokenID == nil || *c.StopTokenID != 151643 || !reflect.DeepEqual(c.TokenIDs, []int{7, 8}) || c.Logprobs[1] != -2.25 {
		t.Fatalf("token_ids answer read as %+v, %v, %v", c, err, bad)
	}
}

// Answers of unusual shapes decode, or fail, as encoding/json and
// parseCompletion have them: a malformed answer is an error (retried), a
// well-formed but unusable one is bad (not retried).
func TestDecodeCompletionShapes(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		err     bool   // not JSON of the answer's shape: retried
		bad     string // a well-formed answer parseCompletion rejects
		wantIDs []int
	}{
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:+5"],"token_logprobs":[-1]}}]}`, wantIDs: []int{5}},
		{raw: `{"choices":[{"token_ids":[null],"logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}}]}`, wantIDs: []int{0}},
		{raw: `{"Choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}}]}`, wantIDs: []int{3}},
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}}],"choices":[{"logprobs":{"tokens":["token_id:4"],"token_logprobs":[-1]}}]}`, wantIDs: []int{4}},
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}},{"text":"second"}]}`, wantIDs: []int{3}},
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}},{"text":5}]}`, err: true},
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}}]} x`, err: true},
		{raw: `{"choices":[{"text":"a` + "\x01" + `","logprobs":{}}]}`, err: true},
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[01]}}]}`, err: true},
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[1e999]}}]}`, err: true},
		{raw: `{"choices":[{"text":5,"logprobs":{}}]}`, err: true},
		{raw: `{"choices":[]}`, bad: "no choices"},
		{raw: `{"choices":[{"logprobs":null}]}`, bad: "no logprobs"},
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[null]}}]}`, bad: "null logprob"},
		{raw: `{"choices":[{"logprobs":{"tokens":["tok"],"token_logprobs":[-1]}}]}`, bad: "not in token_id"},
		{raw: `{"choices":[{"token_ids":[1,2],"logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}}]}`, bad: "token_ids has 2 tokens"},
		{raw: `{"choices":[{"logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1],"text_offset":[]}}]}`, bad: "text offsets"},
		{raw: `{"choices":[{"stop_reason":1.5,"logprobs":{}}]}`, bad: "stop_reason"},
	} {
		c, bad, err := decodeCompletion([]byte(tc.raw))
		switch {
		case tc.err:
			if err == nil {
				t.Errorf("%s: no error", tc.raw)
			}
		case tc.bad != "":
			if err != nil || bad == nil || !strings.Contains(bad.Error(), tc.bad) {
				t.Errorf("%s: got %v, %v; want %q", tc.raw, err, bad, tc.bad)
			}
		default:
			if err != nil || bad != nil || !reflect.DeepEqual(c.TokenIDs, tc.wantIDs) {
				t.Errorf("%s: got %+v, %v, %v", tc.raw, c, err, bad)
			}
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
		{`{"tokens":[1,2],"nested":{"tokens":[9]}}`, []int{1, 2}, false},
		{`{"tokens":[-1,2]}`, []int{-1, 2}, false},
		{`{"tokens":[1.5]}`, nil, true},
		{`{"count":1}`, nil, true},
		{`{"tokens":null}`, nil, true},
		{`{"tokens":[1,2]`, nil, true},
		{`not json`, nil, true},
	} {
		got, err := decodeTokens([]byte(tc.raw))
		if (err != nil) != tc.err || (!tc.err && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("%s: got %v, %v", tc.raw, got, err)
		}
	}
}

// Any completion answer decodes to a usable Completion (as many logprobs
// as ids), an error or a bad answer, never a panic.
func FuzzDecodeCompletion(f *testing.F) {
	f.Add(cannedCompletion())
	f.Add([]byte(`{"choices":[{"text":"a\u00e9\"","finish_reason":null,"stop_reason":7,"token_ids":[1,2],"logprobs":{"tokens":["token_id:1","token_id:2"],"token_logprobs":[-3,-1.5e-3],"text_offset":[0,1]}}]}`))
	f.Add([]byte(`{"choices":[{"TEXT":"a","logprobs":null}],"choices":[{"text":"b"}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, bad, err := decodeCompletion(raw)
		if err == nil && bad == nil && len(c.TokenIDs) != len(c.Logprobs) {
			t.Fatalf("%q: %d ids, %d logprobs", raw, len(c.TokenIDs), len(c.Logprobs))
		}
	})
}

// Any /tokenize answer decodes to ids or an error, never a panic.
func FuzzDecodeTokens(f *testing.F) {
	f.Add([]byte(`{"count":2,"tokens":[1,2]}`))
	f.Add([]byte(`{"tokens":[ ]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if ids, err := decodeTokens(raw); err == nil && ids == nil {
			t.Fatalf("%q: nil ids without an error", raw)
		}
	})
}
