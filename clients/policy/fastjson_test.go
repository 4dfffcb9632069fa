package policy

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// slowCompletion is decodeCompletion without the scanner: encoding/json and
// parseCompletion.
func slowCompletion(raw []byte) (*Completion, error, error) {
	var resp completionResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, nil, err
	}
	c, bad := parseCompletion(&resp)
	return c, bad, nil
}

// Answers of the usual shapes are read by the scanner, and read exactly as
// encoding/json and parseCompletion read them.
func TestScanCompletionUsualAnswers(t *testing.T) {
	for _, raw := range []string{
		string(cannedCompletion()),
		`{"choices":[{"text":"<search> a\n\"b\"\t\\ é </search>","finish_reason":"stop","stop_reason":"</search>","logprobs":{"tokens":["token_id:1","token_id:0"],"token_logprobs":[-0.5,-1e-3],"top_logprobs":[{"token_id:1":-0.5},{"token_id:0":-1E-3}],"text_offset":[0,3]}}]}`,
		` { "id" : "x" , "choices" : [ { "index" : 0 , "text" : "ab" , "finish_reason" : null , "stop_reason" : 151643 , "token_ids" : [ 7 , 8 ] , "logprobs" : { "tokens" : [ "token_id:7" , "token_id:8" ] , "token_logprobs" : [ 0 , -2.25 ] } } ] , "usage" : { "x" : [ true , false , null , -1.5e+2 , {} , [] ] } } `,
		`{"choices":[{"text":"\u00e9\ud83d\ude00","logprobs":{"tokens":[],"token_logprobs":[],"text_offset":[]},"stop_reason":null}]}`,
		`{"choices":[{"text":null,"logprobs":{"tokens":null,"token_logprobs":null}}]}`,
		`{"choices":[{"logprobs":{}}],"choices_extra":1}`,
		`{"choices":[{"text":"\ud83d\ude00 \ud800","logprobs":{"tokens":["token_id:3"],"token_logprobs":[-1]}}]}`,
		`{"choices":[{"text":"\u003csearch\u003e q \u0026 \u00e9 \u2028\u0000\u001f","logprobs":{"tokens":[],"token_logprobs":[]},"stop_reason":"\u003c/search\u003e"}]}`,
	} {
		fast, ok := scanCompletion([]byte(raw))
		if !ok {
			t.Errorf("%s: scanner gave up", raw)
			continue
		}
		want, bad, err := slowCompletion([]byte(raw))
		if err != nil || bad != nil {
			t.Fatalf("%s: slow path failed: %v %v", raw, err, bad)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Errorf("%s:\nscan %+v\njson %+v", raw, fast, want)
		}
	}
	c, ok := scanCompletion(cannedCompletion())
	if !ok || len(c.TokenIDs) != 40 || c.TokenIDs[39] != 1039 || c.Logprobs[0] != -0.123456789012345 || c.TextOffsets[39] != 156 || c.StopReason != "</search>" || c.FinishReason != "stop" {
		t.Fatalf("canned answer read as %+v", c)
	}
}

// Shapes the scanner leaves to encoding/json still decode (or fail) as
// they did.
func TestDecodeCompletionLeftToJSON(t *testing.T) {
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
		if _, ok := scanCompletion([]byte(tc.raw)); ok {
			t.Errorf("%s: the scanner took it", tc.raw)
		}
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

// Whatever the scanner accepts, encoding/json and parseCompletion read the
// same; and decodeCompletion fails exactly when encoding/json does.
func FuzzDecodeCompletion(f *testing.F) {
	f.Add(cannedCompletion())
	f.Add([]byte(`{"choices":[{"text":"a\u00e9\"","finish_reason":null,"stop_reason":7,"token_ids":[1,2],"logprobs":{"tokens":["token_id:1","token_id:2"],"token_logprobs":[-3,-1.5e-3],"text_offset":[0,1]}}]}`))
	f.Add([]byte(`{"Choices":[{"text":"a"}]}`))
	f.Add([]byte(`{"choices":[{"TEXT":"a","logprobs":null}],"choices":[{"text":"b"}]}`))
	f.Add([]byte(`{"choices":[{"text":"\xff","logprobs":{"tokens":[],"token_logprobs":[]}}]}`))
	f.Add([]byte(`{"choices":[{"text":"\u003c\u00E9\uFFFF","logprobs":{"tokens":[],"token_logprobs":[]}}]}`))
	f.Add([]byte(`{"choices":[{"text":"\ud800x","stop_reason":"\n","logprobs":{"tokens":["token_id:0"],"token_logprobs":[0],"x":[{"a":[1,{"b":null}]}]}}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, wantBad, wantErr := slowCompletion(raw)
		if fast, ok := scanCompletion(raw); ok {
			if wantErr != nil || wantBad != nil {
				t.Fatalf("%q: scanner accepted what the slow path rejects: %v %v", raw, wantErr, wantBad)
			}
			if !reflect.DeepEqual(fast, want) {
				t.Fatalf("%q:\nscan %+v\njson %+v", raw, fast, want)
			}
		}
		got, bad, err := decodeCompletion(raw)
		if (err != nil) != (wantErr != nil) || (bad != nil) != (wantBad != nil) {
			t.Fatalf("%q: decode %v %v, slow %v %v", raw, err, bad, wantErr, wantBad)
		}
		if err == nil && bad == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\ndecode %+v\nslow   %+v", raw, got, want)
		}
	})
}

func TestScanTokensUsualAnswers(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []int
	}{
		{`{"count":3,"max_model_len":32768,"tokens":[5,0,123456],"token_strs":null}`, []int{5, 0, 123456}},
		{`{"count":0,"tokens":[]}`, []int{}},
		{` { "tokens" : [ 1 , 2 ] , "count" : null } `, []int{1, 2}},
		{`{"tokens":[1,2],"nested":{"tokens":[9]}}`, []int{1, 2}},
	} {
		got, ok := scanTokens([]byte(tc.raw))
		if !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v %v", tc.raw, got, ok)
		}
	}
	for _, raw := range []string{`{"tokens":[1],"tokens":[2]}`, `{"Tokens":[1]}`, `{"tokens":[null]}`, `{"count":"3","tokens":[1]}`, `{"tokens":null}`, `{"count":1}`, `[1]`, `{"tokens":[1.5]}`} {
		if ids, ok := scanTokens([]byte(raw)); ok {
			t.Errorf("%s: the scanner took it: %v", raw, ids)
		}
	}
}

// The hand-written encoders write what encoding/json writes.
func TestEncodersEqualMarshal(t *testing.T) {
	for _, s := range []string{"", "plain", `"q" \ /`, "\n\r\t\b\f\x00\x1f\x7f", "<information>Doc 1(Title: \"a&b\")</information>",
		"é ü 中文 😀", "\u2028\u2029", "bad \xff\xfe utf8 \xe2\x82", "\ufffd"} {
		checkStringEncoding(t, s)
	}
	for _, f := range []float64{0, 1, -1, 0.7, 0.95, 1e-6, 9.99e-7, 1e-9, 1e20, 1e21, 123456789.125, -2.5e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Copysign(0, -1)} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := appendJSONFloat(nil, f); err != nil || string(got) != string(want) {
			t.Errorf("%v: %s %v, want %s", f, got, err, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := appendJSONFloat(nil, f); err == nil {
			t.Errorf("%v: no error", f)
		}
	}
}

func checkStringEncoding(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := appendJSONString(nil, s); string(got) != string(want) {
		t.Fatalf("%q: %s, want %s", s, got, want)
	}
	for _, add := range []bool{false, true} {
		want, err := json.Marshal(map[string]any{"model": s + "m", "prompt": s, "add_special_tokens": add})
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenizeBody(s+"m", s, add); string(got) != string(want) {
			t.Fatalf("tokenize %q: %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("<information>\n\"x\" & y</information>")
	f.Add("\xff\u2028é")
	f.Fuzz(func(t *testing.T, s string) { checkStringEncoding(t, s) })
}

func TestAppendInt(t *testing.T) {
	for _, v := range []int{0, 1, 9, 10, 99, 100, 101, 999, 1000, 151643, 99999999, 1e17 - 1, 1e17, 1e18 - 1, 1e18, math.MaxInt, -1, -151643, math.MinInt} {
		checkAppendInt(t, v)
	}
}

func checkAppendInt(t *testing.T, v int) {
	t.Helper()
	for _, prefix := range [][]byte{nil, []byte("[1,"), make([]byte, 3, 64)} {
		want := strconv.AppendInt(append([]byte(nil), prefix...), int64(v), 10)
		if got := appendInt(append(prefix[:len(prefix):len(prefix)], prefix[len(prefix):]...), v); string(got) != string(want) {
			t.Fatalf("%d: %q, want %q", v, got, want)
		}
		if got := appendInt(prefix, v); string(got) != string(want) {
			t.Fatalf("%d with room: %q, want %q", v, got, want)
		}
	}
}

func FuzzAppendInt(f *testing.F) {
	f.Add(151643)
	f.Fuzz(func(t *testing.T, v int) { checkAppendInt(t, v) })
}

// appendInts writes what encoding/json writes for the elements of an []int.
func TestAppendInts(t *testing.T) {
	for _, ids := range [][]int{nil, {0}, {7, 8}, {151643, 9, 99, 100, 1e9, 1e18, math.MaxInt, -1, math.MinInt, 0}} {
		want, _ := json.Marshal(ids)
		if ids == nil {
			want = []byte("[]")
		}
		for _, prefix := range [][]byte{nil, make([]byte, 0, 4)} {
			got := append(appendInts(append(prefix, '['), ids), ']')
			if string(got) != string(want) {
				t.Errorf("%v: %s, want %s", ids, got, want)
			}
		}
	}
	for v := uint64(1); v < 1e19 && v > 0; v = v*10 - 1 {
		for _, x := range []uint64{v - 1, v, v + 1} {
			if got, want := decimalDigits(x), len(strconv.FormatUint(x, 10)); got != want {
				t.Fatalf("decimalDigits(%d) = %d, want %d", x, got, want)
			}
		}
		if v > 1 {
			v++
		}
	}
}

func FuzzAppendInts(f *testing.F) {
	f.Add(151643, 7, -1)
	f.Fuzz(func(t *testing.T, a, b, c int) {
		ids := []int{a, b, c}
		want, _ := json.Marshal(ids)
		if got := append(appendInts([]byte("["), ids), ']'); string(got) != string(want) {
			t.Fatalf("%v: %s, want %s", ids, got, want)
		}
	})
}
