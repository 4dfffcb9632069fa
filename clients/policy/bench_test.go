package policy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// cannedCompletion is a realistic 40-token completion answer.
func cannedCompletion() []byte {
	var toks, lps, top, off []string
	for i := 0; i < 40; i++ {
		toks = append(toks, fmt.Sprintf(`"token_id:%d"`, 1000+i))
		lps = append(lps, "-0.123456789012345")
		top = append(top, fmt.Sprintf(`{"token_id:%d":-0.123456789012345}`, 1000+i))
		off = append(off, fmt.Sprint(i*4))
	}
	return []byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"` +
		strings.Repeat("abcd", 40) + `","finish_reason":"stop","stop_reason":"</search>","logprobs":{"tokens":[` + strings.Join(toks, ",") +
		`],"token_logprobs":[` + strings.Join(lps, ",") + `],"top_logprobs":[` + strings.Join(top, ",") + `],"text_offset":[` + strings.Join(off, ",") +
		`]},"prompt_logprobs":null}],"usage":{"prompt_tokens":1500,"completion_tokens":40,"total_tokens":1540}}`)
}

// BenchmarkComplete measures one completion call with a 1500-token prompt
// over loopback (client and server in this process).
func BenchmarkComplete(b *testing.B) {
	body := cannedCompletion()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c, err := New(transport.DefaultOptions("policy", srv.URL))
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]int, 1500)
	for i := range prompt {
		prompt[i] = 10000 + i
	}
	seed := int64(1)
	req := CompletionRequest{Model: "m", Prompt: prompt, MaxTokens: 500, Sampling: Neutral(), Seed: &seed, Stop: []string{"</search>", "</answer>"}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Complete(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCompletion measures reading a 40-token completion answer.
func BenchmarkDecodeCompletion(b *testing.B) {
	body := cannedCompletion()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, bad, err := decodeCompletion(body); err != nil || bad != nil {
			b.Fatal(err, bad)
		}
	}
}
