package retriever

import (
	"context"
	"encoding/json"
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
	f.Add([]byte(`{"result":[[{"document":{"title":"T","text":"x","contents":"\"T\"\nx"},"score":3.5}]]}`))
	f.Add([]byte(`{"result":[[{"document":{"title":"T"},"score":3.5}]]}`))
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

// The answers of the reference dense server, of BM25 servers (title, text
// and contents) and of the simulator are read.
func TestRetrieveReadsUsualAnswers(t *testing.T) {
	for _, body := range []string{
		`{"result": [[{"document": {"id": "12", "contents": "\"Paris\"\nParis is the capital."}, "score": 0.83}, {"document": {"id": "7", "contents": "\"Lyon\"\nA city."}, "score": 0.5}], []]}`,
		`{"result":[[{"document":{"id":"3","title":"Paris","text":"Paris is the capital.","contents":"\"Paris\"\nParis is the capital."},"score":12.25}],[{"document":{"id":4,"title":"L","text":"t"},"score":1}]]}`,
	} {
		hits, ok := readAnswer([]byte(body), 2)
		if !ok {
			t.Fatalf("not read: %s", body)
		}
		if len(hits) != 2 || len(hits[0]) == 0 || hits[0][0].Contents == "" || hits[0][0].ID == "" {
			t.Fatalf("hits %v", hits)
		}
	}
	if _, ok := readAnswer([]byte(`{"result":[[]]}`), 2); ok {
		t.Fatal("one result for two queries taken")
	}
}

// readAnswer is Retrieve's reading of an answer for queries queries: ok
// when it gives hits for every query.
func readAnswer(raw []byte, queries int) ([][]Hit, bool) {
	var resp retrieveResponse
	if json.Unmarshal(raw, &resp) != nil {
		return nil, false
	}
	hits, err := resp.hits(queries)
	return hits, err == nil
}
