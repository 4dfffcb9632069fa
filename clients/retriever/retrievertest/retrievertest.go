// Package retrievertest is the contract suite of the retriever role: the
// subtests every backend of clients/retriever's Retriever interface (a
// client and the Search-R1 retrieval server it speaks to: the dense e5 +
// faiss retriever, the BM25 one, the embedded BM25 handler) must pass. The
// behaviours are those docs/conformance.md records in its "Search-R1
// retriever" section.
//
// A new backend implements retriever.Retriever, writes a test that returns
// a Backend for a server, and calls Run.
package retrievertest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/retriever"
)

// Backend is one retrieval server and the client under test that speaks to
// it. Run asks for a new Backend in every subtest; the function that makes
// it registers the cleanup of its server and client.
type Backend struct {
	// Retriever is the client under test.
	Retriever retriever.Retriever
	// URL is the server's base URL, for the checks of the server's own
	// answers to bodies the client never sends.
	URL string
	// Queries are queries that each have at least 5 hits.
	Queries []string
	// IDs says the server sends each document's corpus id (the dense
	// shape, {id, contents}); false for Search-R1's BM25 shape ({title,
	// text, contents}, no id), whose hits get retriever.SynthID(contents).
	IDs bool
}

// Run runs the contract suite against the backends newBackend makes, one
// per subtest.
func Run(t *testing.T, newBackend func(t *testing.T) *Backend) {
	for _, st := range []struct {
		name string
		fn   func(t *testing.T, b *Backend)
	}{
		{"OneResultListPerQueryInOrder", batchShape},
		{"TopKBoundsTheHits", topk},
		{"ScoresAreFiniteBestFirst", scores},
		{"DocumentShapeAndID", documentShape},
		{"EmptyBatchAndBadTopK", emptyAndBadTopK},
		{"WithoutReturnScoresIs500", withoutScores},
	} {
		t.Run(st.name, func(t *testing.T) { st.fn(t, newBackend(t)) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func retrieve(t *testing.T, b *Backend, queries []string, k int) [][]retriever.Hit {
	t.Helper()
	hits, err := b.Retriever.Retrieve(ctx(t), queries, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != len(queries) {
		t.Fatalf("%d result lists for %d queries", len(hits), len(queries))
	}
	return hits
}

// conformance.md "Search-R1 retriever" (POST /retrieve {queries}; answer
// {"result": [per query: [...]]}): one list per query, in the batch's
// order, each the list the query gets alone.
func batchShape(t *testing.T, b *Backend) {
	batch := retrieve(t, b, b.Queries, 3)
	for i, q := range b.Queries {
		if len(batch[i]) == 0 {
			t.Errorf("query %q: no hits", q)
		}
		alone := retrieve(t, b, []string{q}, 3)[0]
		if !reflect.DeepEqual(alone, batch[i]) {
			t.Errorf("query %q: alone %v, in the batch %v", q, alone, batch[i])
		}
	}
}

// conformance.md "Search-R1 retriever" (topk, always sent): at most topk
// hits, a longer list starting with the shorter one.
func topk(t *testing.T, b *Backend) {
	one := retrieve(t, b, b.Queries, 1)
	five := retrieve(t, b, b.Queries, 5)
	for i, q := range b.Queries {
		if len(one[i]) != 1 || len(five[i]) != 5 {
			t.Errorf("query %q: %d hits at topk 1, %d at topk 5", q, len(one[i]), len(five[i]))
			continue
		}
		if one[i][0].Contents != five[i][0].Contents {
			t.Errorf("query %q: the best hit differs between topk 1 and 5", q)
		}
	}
}

// conformance.md "Search-R1 retriever" (score per hit, required): finite
// scores, best first.
func scores(t *testing.T, b *Backend) {
	for i, hits := range retrieve(t, b, b.Queries, 5) {
		for j, h := range hits {
			if math.IsNaN(h.Score) || math.IsInf(h.Score, 0) {
				t.Errorf("query %d hit %d: score %v", i, j, h.Score)
			}
			if j > 0 && h.Score > hits[j-1].Score {
				t.Errorf("query %d: hit %d scores %v above hit %d's %v", i, j, h.Score, j-1, hits[j-1].Score)
			}
		}
	}
}

// conformance.md "Search-R1 retriever" (dense: document {id, contents};
// BM25 with raw docs: {title, text, contents}, no id, the client's id
// sha256:<16 hex> of contents).
func documentShape(t *testing.T, b *Backend) {
	for i, hits := range retrieve(t, b, b.Queries, 3) {
		for j, h := range hits {
			if h.Contents == "" {
				t.Errorf("query %d hit %d: no contents", i, j)
			}
			if title, _ := retriever.SplitContents(h.Contents); title == "" {
				t.Errorf("query %d hit %d: contents %q without a title line", i, j, h.Contents)
			}
			switch {
			case b.IDs && (h.ID == "" || h.IDFromContents || strings.HasPrefix(h.ID, retriever.SynthIDPrefix)):
				t.Errorf("query %d hit %d: id %q (made from contents: %v), want the server's corpus id", i, j, h.ID, h.IDFromContents)
			case !b.IDs && (h.ID != retriever.SynthID(h.Contents) || !h.IDFromContents):
				t.Errorf("query %d hit %d: id %q (made from contents: %v), want %s", i, j, h.ID, h.IDFromContents, retriever.SynthID(h.Contents))
			}
		}
	}
}

// The client's own rules (clients/retriever Retrieve): an empty batch is
// answered without a request, a topk <= 0 refused before sending
// (conformance.md "Search-R1 retriever", topk row).
func emptyAndBadTopK(t *testing.T, b *Backend) {
	if hits, err := b.Retriever.Retrieve(ctx(t), nil, 3); err != nil || len(hits) != 0 {
		t.Errorf("empty batch: %v, %v", hits, err)
	}
	if _, err := b.Retriever.Retrieve(ctx(t), b.Queries, 0); err == nil {
		t.Error("topk 0 accepted")
	}
}

// conformance.md "Search-R1 retriever" (return_scores defaults to false:
// the reference server's unpacking fails with Starlette's plain 500 for
// any batch but two queries), which is why the client always sends true.
func withoutScores(t *testing.T, b *Backend) {
	body, err := json.Marshal(map[string]any{"queries": b.Queries[:1], "topk": 3})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post(b.URL+"/retrieve", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ans, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusInternalServerError || strings.TrimSpace(string(ans)) != "Internal Server Error" {
		t.Errorf("without return_scores: %d %q, want 500 Internal Server Error", resp.StatusCode, ans)
	}
}
