package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// vLLM's and SGLang's request models ignore the fields they lack (vLLM logs
// them): a misspelt field is accepted, does nothing, and the simulated
// servers name it in IgnoredFieldsHeader and count it in IgnoredFields.
func TestSimServersIgnoreUnknownFieldsLikeVLLM(t *testing.T) {
	f := getFixture(t)
	ps := NewPolicyServer(f.model, testBase)
	psrv := httptest.NewServer(ps.Handler())
	t.Cleanup(psrv.Close)
	js := NewJudgeServer("judge-model", "", nil)
	jsrv := httptest.NewServer(js.Handler())
	t.Cleanup(jsrv.Close)
	post := func(url string, body map[string]any) (int, http.Header, map[string]any) {
		t.Helper()
		raw, _ := json.Marshal(body)
		resp, err := http.Post(url, "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, resp.Header, out
	}
	// The misspelt temperature is ignored: the answer is that of a request
	// without it (greedy here, by the other fields), not a 400.
	base := map[string]any{"model": testBase, "prompt": []int{1, 2, 3}, "max_tokens": 4, "temperature": 0, "seed": 1}
	typo := map[string]any{"model": testBase, "prompt": []int{1, 2, 3}, "max_tokens": 4, "temperature": 0, "seed": 1, "temprature": 1.5, "top_q": 1}
	st, h, want := post(psrv.URL+"/v1/completions", base)
	if st != 200 || h.Get(IgnoredFieldsHeader) != "" {
		t.Fatalf("plain completion: %d %q %v", st, h.Get(IgnoredFieldsHeader), want)
	}
	st, h, got := post(psrv.URL+"/v1/completions", typo)
	if st != 200 || h.Get(IgnoredFieldsHeader) != "temprature,top_q" {
		t.Fatalf("completion with unknown fields: %d, header %q, want 200 and temprature,top_q", st, h.Get(IgnoredFieldsHeader))
	}
	if !reflect.DeepEqual(got["choices"], want["choices"]) {
		t.Errorf("an ignored field changed the answer: %v vs %v", got["choices"], want["choices"])
	}
	if st, h, _ := post(psrv.URL+"/tokenize", map[string]any{"model": testBase, "prompt": "x", "add_special_tokens": false, "bogus": 1}); st != 200 || h.Get(IgnoredFieldsHeader) != "bogus" {
		t.Errorf("tokenize with an unknown field: %d %q", st, h.Get(IgnoredFieldsHeader))
	}
	if st, h, _ := post(psrv.URL+"/update_weights_from_disk", map[string]any{"model_path": t.TempDir(), "load_format": "auto", "abort_all_requests": false, "bogus": 1}); st != 400 || h.Get(IgnoredFieldsHeader) != "bogus" {
		t.Errorf("update_weights_from_disk with an unknown field: %d %q (want SGLang's refusal of an empty directory, the field ignored)", st, h.Get(IgnoredFieldsHeader))
	}
	wantCounts := map[string]int{"POST /v1/completions temprature": 1, "POST /v1/completions top_q": 1, "POST /tokenize bogus": 1, "POST /update_weights_from_disk bogus": 1}
	if got := ps.IgnoredFields(); !reflect.DeepEqual(got, wantCounts) {
		t.Errorf("policy IgnoredFields %v, want %v", got, wantCounts)
	}
	msgs := []map[string]string{{"role": "user", "content": "Question: who? Gold answers: x"}}
	if st, h, _ := post(jsrv.URL+"/v1/chat/completions", map[string]any{"model": "judge-model", "messages": msgs, "max_tokens": 16, "temperature": 0, "top_q": 1}); st != 200 || h.Get(IgnoredFieldsHeader) != "top_q" {
		t.Errorf("chat with an unknown field: %d %q", st, h.Get(IgnoredFieldsHeader))
	}
	if got := js.IgnoredFields(); !reflect.DeepEqual(got, map[string]int{"POST /v1/chat/completions top_q": 1}) {
		t.Errorf("judge IgnoredFields %v", got)
	}
}
