package retriever

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Any answer body gives hits for every query or an error, never a panic.
func FuzzRetrieveAnswer(f *testing.F) {
	f.Add([]byte(`{"result":[[{"document":{"id":"1","contents":"\"T\"\nx"},"score":1.5}]]}`))
	f.Add([]byte(`{"result":[[{"document":{"id":7,"title":"T","text":"x"},"score":1}]]}`))
	f.Add([]byte(`{"result":null}`))
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	o := transport.DefaultOptions("retriever", srv.URL)
	o.Retries = 0
	c, err := New(o)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		body = b
		hits, err := c.Retrieve(context.Background(), []string{"q"}, 3)
		if err == nil && len(hits) != 1 {
			t.Fatalf("%d results for 1 query", len(hits))
		}
	})
}
