package judge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Any answer body gives a critique or an error, never a panic.
func FuzzChatAnswer(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"role":"assistant","content":"Search for X."}}]}`))
	f.Add([]byte(`{"choices":[]}`))
	f.Add([]byte(`{"choices":[{"message":{"content":null}}]}`))
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	o := transport.DefaultOptions("judge", srv.URL)
	o.Retries = 0
	c, err := New(o, "m", "")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		body = b
		_, _ = c.Chat(context.Background(), ChatRequest{Messages: []Message{{Role: "user", Content: "q"}}, MaxTokens: 5, Sampling: Greedy()})
	})
}
