package retriever

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
)

// bm25Body is an answer of Search-R1's retrieval_server.py over a BM25
// (pyserini) index that stores the raw documents: each document is
// {title, text, contents} with no id, title being the first line of
// contents with its quotes stripped and text the lines after it.
const bm25Body = `{"result":[[` +
	`{"document":{"title":"Paris","text":"Paris is the capital of France.\nIt is on the Seine.","contents":"\"Paris\"\nParis is the capital of France.\nIt is on the Seine."},"score":12.5},` +
	`{"document":{"title":"Lyon","text":"Lyon is a city.","contents":"\"Lyon\"\nLyon is a city."},"score":7.25}],` +
	`[{"document":{"title":"Nice","text":"","contents":"\"Nice\""},"score":1}]]}`

// wantSynthID is the id the client gives a document sent without one:
// "sha256:" and the first 16 hex digits of the SHA-256 of its contents.
func wantSynthID(contents string) string {
	sum := sha256.Sum256([]byte(contents))
	return "sha256:" + hex.EncodeToString(sum[:])[:16]
}

func TestRetrieveAcceptsSearchR1BM25HitsWithoutID(t *testing.T) {
	s, c := newTest(t)
	s.Handle("/retrieve", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(bm25Body))
	})
	got, err := c.Retrieve(context.Background(), []string{"capital of france", "nice"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	paris := "\"Paris\"\nParis is the capital of France.\nIt is on the Seine."
	lyon := "\"Lyon\"\nLyon is a city."
	nice := "\"Nice\""
	want := [][]Hit{
		{{ID: wantSynthID(paris), Contents: paris, Score: 12.5}, {ID: wantSynthID(lyon), Contents: lyon, Score: 7.25}},
		{{ID: wantSynthID(nice), Contents: nice, Score: 1}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for q := range want {
		if len(got[q]) != len(want[q]) {
			t.Fatalf("query %d: got %v", q, got[q])
		}
		for i, w := range want[q] {
			g := got[q][i]
			if g.ID != w.ID || !g.IDFromContents || g.Contents != w.Contents || g.Score != w.Score {
				t.Errorf("query %d hit %d: got %+v, want %+v", q, i, g, w)
			}
		}
	}
}

// Search-R1's BM25 answers are read, each hit's id synthesised.
func TestRetrieveReadsSearchR1BM25Answers(t *testing.T) {
	hits, ok := readAnswer([]byte(bm25Body), 2)
	if !ok {
		t.Fatal("BM25 answer not read")
	}
	if h := hits[0][0]; h.ID != wantSynthID(h.Contents) || !h.IDFromContents {
		t.Fatalf("id %q", hits[0][0].ID)
	}
}

// A document with neither id nor contents (nor title and text) is an
// error naming the server and the hit's position.
func TestRetrieveRejectsDocumentWithNeitherIDNorContents(t *testing.T) {
	s, c := newTest(t)
	s.Handle("/retrieve", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		_, _ = w.Write([]byte(`{"result":[[{"document":{"id":"1","contents":"\"A\"\nx"},"score":1},{"document":{"title":"B"},"score":0.5}]]}`))
	})
	_, err := c.Retrieve(context.Background(), []string{"q"}, 2)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{s.URL, "query 0 hit 1", "without id or contents"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func TestSynthID(t *testing.T) {
	a := SynthID("\"Paris\"\nParis is the capital of France.")
	if a != wantSynthID("\"Paris\"\nParis is the capital of France.") || len(a) != len(SynthIDPrefix)+16 || !strings.HasPrefix(a, SynthIDPrefix) {
		t.Fatalf("SynthID = %q", a)
	}
	if SynthID("\"Paris\"\nParis is the capital of France!") == a {
		t.Fatal("different contents, same id")
	}
}

// A document that sends its id keeps it, even beside title and text.
func TestRetrieveKeepsSentIDs(t *testing.T) {
	hits, ok := readAnswer([]byte(`{"result":[[{"document":{"id":"0","title":"T","text":"x","contents":"\"T\"\nx"},"score":1}]]}`), 1)
	if !ok || hits[0][0].ID != "0" || hits[0][0].IDFromContents {
		t.Fatalf("%v %v", hits, ok)
	}
}
