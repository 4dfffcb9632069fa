package bm25_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
	"github.com/hindsearch/hindsearch/clients/retriever/retrievertest"
	"github.com/hindsearch/hindsearch/clients/transport"
)

// contractCorpus is a small corpus in wiki-18's form: each query of the
// suite matches at least five passages.
var contractCorpus = []string{
	`"Ernest Hemingway"\nErnest Hemingway was an American novelist who wrote The Old Man and the Sea.`,
	`"The Old Man and the Sea"\nThe Old Man and the Sea is a novella by Ernest Hemingway about an old fisherman.`,
	`"Santiago (fisherman)"\nSantiago is the old fisherman of the novella, a man of the sea.`,
	`"Pulitzer Prize for Fiction"\nHemingway won the Pulitzer Prize for The Old Man and the Sea in 1953.`,
	`"Key West"\nHemingway lived in Key West, near the sea, where he wrote novels.`,
	`"Gulf Stream"\nThe Gulf Stream is the sea current where the old man fished for marlin.`,
	`"Marlin"\nA marlin is a fish of the sea; the old man caught one in the novella.`,
	`"Lavatera"\nLavatera is a genus of flowering plants in the mallow family, native to the Mediterranean.`,
	`"Mallow"\nMallow is a common name of plants in the family Malvaceae, such as Lavatera and Malva.`,
	`"Malva"\nMalva is a genus of herbaceous plants of the mallow family, related to Lavatera.`,
	`"Hibiscus"\nHibiscus is a genus of flowering plants in the mallow family Malvaceae.`,
	`"Hollyhock"\nThe hollyhock is a flowering plant of the mallow family, once grouped with Lavatera.`,
}

// TestRetrieverContract runs the retriever suite against clients/retriever
// and the embedded BM25 handler in both of Search-R1's document shapes.
func TestRetrieverContract(t *testing.T) {
	var lines []string
	for i, c := range contractCorpus {
		lines = append(lines, `{"id": "`+string(rune('0'+i/10))+string(rune('0'+i%10))+`", "contents": "`+strings.ReplaceAll(c, `"`, `\"`)+`"}`)
	}
	corpus := filepath.Join(t.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(corpus, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ix, err := bm25.Open(context.Background(), corpus, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	for _, tc := range []struct {
		style bm25.Style
		ids   bool
	}{{bm25.StyleDense, true}, {bm25.StyleBM25, false}} {
		t.Run(string(tc.style), func(t *testing.T) {
			retrievertest.Run(t, func(t *testing.T) *retrievertest.Backend {
				srv := httptest.NewServer(ix.Handler(tc.style))
				t.Cleanup(srv.Close)
				c, err := retriever.New(transport.Options{BaseURL: srv.URL, Timeout: 10 * time.Second, Retries: 1,
					RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				return &retrievertest.Backend{Retriever: c, URL: srv.URL, IDs: tc.ids,
					Queries: []string{"old man and the sea Hemingway", "mallow family Lavatera"}}
			})
		})
	}
}
