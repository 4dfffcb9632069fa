package retriever

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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

// The scanner's fast path reads exactly what encoding/json and the
// conversion make of an answer, whenever it takes one.
func FuzzScanRetrieve(f *testing.F) {
	f.Add([]byte(`{"result":[[{"document":{"id":"1","contents":"\"T\"\nx"},"score":1.5}]]}`), uint8(1))
	f.Add([]byte(`{"result":[[{"document":{"id":7,"title":"T","text":"x\u00e9\n"},"score":-2e-3}],[]]}`), uint8(2))
	f.Add([]byte(`{"result":[[{"score":0.25,"document":{"text":"b","id":"x","title":"a","extra":[1,{"k":null}]}}]],"took":3}`), uint8(1))
	f.Add([]byte(`{"RESULT":[[]]}`), uint8(1))
	f.Add([]byte(`{"result":[[{"document":{"id":"1","contents":null,"title":"t","text":"x"},"score":1}]]}`), uint8(1))
	f.Add([]byte(`{"result":[[{"document":{"title":"T","text":"x","contents":"\"T\"\nx"},"score":12.25}],[{"document":{"id":null,"contents":"c"},"score":1}]]}`), uint8(2))
	f.Add([]byte(`{"result":[[{"document":{"text":"x","title":"T"},"score":1}]]}`), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		queries := int(n%4) + 1
		fast, ok := scanRetrieve(b, queries)
		if !ok {
			return
		}
		var resp retrieveResponse
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatalf("scanner took %q, encoding/json: %v", b, err)
		}
		slow, err := resp.hits(queries)
		if err != nil {
			t.Fatalf("scanner took %q, conversion: %v", b, err)
		}
		if len(fast) != len(slow) {
			t.Fatalf("%q: %d results, want %d", b, len(fast), len(slow))
		}
		for q := range slow {
			if len(fast[q]) != len(slow[q]) {
				t.Fatalf("%q: query %d: %d hits, want %d", b, q, len(fast[q]), len(slow[q]))
			}
			for i, h := range slow[q] {
				g := fast[q][i]
				if g.ID != h.ID || g.IDFromContents != h.IDFromContents || g.Contents != h.Contents || math.Float64bits(g.Score) != math.Float64bits(h.Score) {
					t.Fatalf("%q: query %d hit %d: %s, want %s", b, q, i, fmt.Sprint(g), fmt.Sprint(h))
				}
			}
		}
	})
}

// The answers of the reference dense server, of BM25 servers (title, text
// and contents) and of the simulator take the fast path.
func TestScanRetrieveTakesUsualAnswers(t *testing.T) {
	for _, body := range []string{
		`{"result": [[{"document": {"id": "12", "contents": "\"Paris\"\nParis is the capital."}, "score": 0.83}, {"document": {"id": "7", "contents": "\"Lyon\"\nA city."}, "score": 0.5}], []]}`,
		`{"result":[[{"document":{"id":"3","title":"Paris","text":"Paris is the capital.","contents":"\"Paris\"\nParis is the capital."},"score":12.25}],[{"document":{"id":4,"title":"L","text":"t"},"score":1}]]}`,
	} {
		hits, ok := scanRetrieve([]byte(body), 2)
		if !ok {
			t.Fatalf("slow path for %s", body)
		}
		if len(hits) != 2 || len(hits[0]) == 0 || hits[0][0].Contents == "" || hits[0][0].ID == "" {
			t.Fatalf("hits %v", hits)
		}
	}
	if _, ok := scanRetrieve([]byte(`{"result":[[]]}`), 2); ok {
		t.Fatal("one result for two queries taken")
	}
}
