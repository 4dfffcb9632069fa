package bm25

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search"

	"github.com/hindsearch/hindsearch/clients/retriever"
)

// passage makes a corpus line.
func passage(id, title, text string) string {
	b, err := json.Marshal(map[string]string{"id": id, "contents": fmt.Sprintf("%q\n%s", title, text)})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// writeCorpus writes lines as a corpus file in a new temp dir.
func writeCorpus(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// open opens corpus with cacheDir, recording progress calls.
func open(t *testing.T, corpus, cacheDir string) (*Index, [][2]int) {
	t.Helper()
	var calls [][2]int
	ix, err := Open(context.Background(), corpus, cacheDir, func(done, total int) {
		calls = append(calls, [2]int{done, total})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	return ix, calls
}

var animals = []string{
	passage("z", "Zebra", "zebra zebra lion"),   // zebra×3 lion: 4 tokens
	passage("l", "Lion", "lion tiger tiger"),    // lion×2 tiger×2: 4 tokens
	passage("t", "Tiger", "tiger zebra"),        // tiger×2 zebra: 3 tokens
	passage("e", "Eagle", "hawk falcon osprey"), // 4 tokens
}

func ids(hits []retriever.Hit) []string {
	out := []string{}
	for _, h := range hits {
		out = append(out, h.ID)
	}
	return out
}

func TestBuildAndSearch(t *testing.T) {
	ix, calls := open(t, writeCorpus(t, animals...), t.TempDir())
	if ix.Len() != 4 {
		t.Errorf("Len %d, want 4", ix.Len())
	}
	if want := [][2]int{{4, 4}}; !reflect.DeepEqual(calls, want) {
		t.Errorf("progress calls %v, want %v", calls, want)
	}
	if c, ok := ix.Passage("t"); !ok || c != "\"Tiger\"\ntiger zebra" {
		t.Errorf("Passage(t) = %q, %v", c, ok)
	}
	if _, ok := ix.Passage("nope"); ok {
		t.Error("Passage of an unknown id found")
	}
	res, err := ix.Search(context.Background(), []string{"zebra", "tigers", "", "the and of", "hawk OR falcon", "zebra -zebra AND ("}, 3)
	if err != nil {
		t.Fatal(err)
	}
	got := [][]string{}
	for _, hits := range res {
		got = append(got, ids(hits))
	}
	// "tigers" stems to tiger; t is shorter than l. Query syntax is not
	// parsed: "-zebra" does not exclude.
	want := [][]string{{"z", "t"}, {"t", "l"}, {}, {}, {"e"}, {"z", "t"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hits %q, want %q", got, want)
	}
	if h := res[0][0]; h.Contents != "\"Zebra\"\nzebra zebra lion" || h.Score <= res[0][1].Score {
		t.Errorf("first hit %+v", h)
	}
	for _, topk := range []int{0, -1, MaxTopK + 1} {
		if _, err := ix.Search(context.Background(), []string{"zebra"}, topk); err == nil {
			t.Errorf("topk %d accepted", topk)
		}
	}
}

// TestBM25 proves the scores are BM25 (with this package's true average
// length), not Bleve's default TF-IDF: a score matches the hand-computed
// value, the explanation names the model, and term frequency saturates.
func TestBM25(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	res, err := ix.Search(context.Background(), []string{"zebra"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	const k1, b = 1.2, 0.75
	n, df := 4.0, 2.0
	avg := math.Ceil(15.0 / 4) // 15 tokens in 4 passages
	idf := math.Log(1 + (n-df+0.5)/(df+0.5))
	bm25 := func(freq, length float64) float64 {
		tf := math.Sqrt(freq) // Bleve's tf
		return idf * tf * k1 / (tf + k1*(1-b+b*length/avg))
	}
	want := []retriever.Hit{
		{ID: "z", Contents: "\"Zebra\"\nzebra zebra lion", Score: bm25(3, 4)},
		{ID: "t", Contents: "\"Tiger\"\ntiger zebra", Score: bm25(1, 3)},
	}
	if len(res[0]) != 2 {
		t.Fatalf("hits %+v", res[0])
	}
	for i, h := range res[0] {
		if h.ID != want[i].ID || math.Abs(h.Score-want[i].Score) > 1e-6*want[i].Score {
			t.Errorf("hit %d = %s %.9f, want %s %.9f (BM25)", i, h.ID, h.Score, want[i].ID, want[i].Score)
		}
	}
	tfidf := (1 + math.Log(n/(df+1))) * math.Sqrt(3) / 2 // Bleve's TF-IDF of z
	if math.Abs(res[0][0].Score-tfidf) < 1e-3 {
		t.Errorf("score %.6f is Bleve's TF-IDF", res[0][0].Score)
	}

	q := bleve.NewMatchQuery("zebra")
	q.SetField(field)
	req := bleve.NewSearchRequest(q)
	req.Explain = true
	req.PreSearchData = map[string]any{search.BM25PreSearchDataKey: ix.stats}
	sr, err := ix.bi.Search(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(sr.Hits) == 0 || !strings.Contains(sr.Hits[0].Expl.String(), "as per bm25 model") {
		t.Errorf("explanation does not name bm25: %v", sr.Hits)
	}

	// Saturation: a thousand repetitions score less than (k1+1)·idf, the
	// BM25 bound, where TF-IDF would grow as the square root.
	many := strings.Repeat("gnu ", 1000)
	ix2, _ := open(t, writeCorpus(t, passage("1", "A", "gnu"), passage("2", "B", many), passage("3", "C", "x y"), passage("4", "D", "p q")), t.TempDir())
	res, err = ix2.Search(context.Background(), []string{"gnu"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	idf2 := math.Log(1 + (4-2+0.5)/(2+0.5))
	for _, h := range res[0] {
		if h.Score >= (k1+1)*idf2 {
			t.Errorf("score %f of %s exceeds the BM25 bound %f", h.Score, h.ID, (k1+1)*idf2)
		}
	}
}

func TestTiesInCorpusOrder(t *testing.T) {
	lines := []string{passage("a", "Other", "nothing here")}
	for i := range 9 {
		lines = append(lines, passage(fmt.Sprintf("dup%d", i), "Same", "identical text about moths"))
	}
	lines = append(lines, passage("best", "Moths", "moths moths moths"))
	ix, _ := open(t, writeCorpus(t, lines...), t.TempDir())
	for _, topk := range []int{1, 2, 3, 5, 20} {
		res, err := ix.Search(context.Background(), []string{"moths"}, topk)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"best"}
		for i := 0; len(want) < min(topk, 10); i++ {
			want = append(want, fmt.Sprintf("dup%d", i))
		}
		if got := ids(res[0]); !reflect.DeepEqual(got, want) {
			t.Errorf("topk %d: %q, want %q", topk, got, want)
		}
	}
}

func TestBoundQuery(t *testing.T) {
	long := strings.Repeat("word ", 100)
	if got := strings.Fields(boundQuery(long)); len(got) != MaxQueryTerms {
		t.Errorf("%d terms, want %d", len(got), MaxQueryTerms)
	}
	runes := strings.Repeat("é", MaxQueryChars) // 2 bytes each
	got := boundQuery(runes)
	if len(got) > MaxQueryChars || !strings.HasPrefix(runes, got) || len(got) == 0 {
		t.Errorf("cut to %d bytes", len(got))
	}
	if got := boundQuery("  a \t b\n"); got != "a b" {
		t.Errorf("got %q", got)
	}
}

func TestCacheReuse(t *testing.T) {
	cache := t.TempDir()
	corpus := writeCorpus(t, animals...)
	ix1, calls := open(t, corpus, cache)
	if len(calls) == 0 {
		t.Fatal("first open did not build")
	}
	entries, _ := os.ReadDir(cache)
	if len(entries) != 1 {
		t.Fatalf("cache holds %d entries, want 1", len(entries))
	}
	marker := filepath.Join(cache, entries[0].Name(), markerFile)
	st1, err := os.Stat(marker)
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := ix1.Search(context.Background(), []string{"tiger zebra"}, 3)

	// The same content at another path reuses the index.
	ix2, calls := open(t, writeCorpus(t, animals...), cache)
	if len(calls) != 0 {
		t.Errorf("second open rebuilt (progress %v)", calls)
	}
	st2, err := os.Stat(marker)
	if err != nil || !st2.ModTime().Equal(st1.ModTime()) {
		t.Errorf("marker rewritten: %v", err)
	}
	r2, _ := ix2.Search(context.Background(), []string{"tiger zebra"}, 3)
	if !reflect.DeepEqual(r1, r2) {
		t.Errorf("cached index answers %v, built one %v", r2, r1)
	}

	// Other content gets its own entry.
	_, calls = open(t, writeCorpus(t, append(animals, passage("x", "X", "xylophone"))...), cache)
	if len(calls) == 0 {
		t.Error("a different corpus reused the index")
	}
	entries, _ = os.ReadDir(cache)
	if len(entries) != 2 {
		t.Errorf("cache holds %d entries, want 2", len(entries))
	}
}

func TestDamagedEntryReplaced(t *testing.T) {
	cache := t.TempDir()
	corpus := writeCorpus(t, animals...)
	ix, _ := open(t, corpus, cache)
	ix.Close()
	entries, _ := os.ReadDir(cache)
	entry := filepath.Join(cache, entries[0].Name())
	// A marker that does not match (an older format) forces a rebuild.
	if err := os.WriteFile(filepath.Join(entry, markerFile), []byte(`{"version":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ix, calls := open(t, corpus, cache)
	if len(calls) == 0 {
		t.Fatal("a stale entry was trusted")
	}
	ix.Close()
	// An entry without marker is not trusted either.
	if err := os.Remove(filepath.Join(entry, markerFile)); err != nil {
		t.Fatal(err)
	}
	ix, calls = open(t, corpus, cache)
	if len(calls) == 0 {
		t.Fatal("an entry without marker was trusted")
	}
	if res, err := ix.Search(context.Background(), []string{"zebra"}, 1); err != nil || len(res[0]) != 1 {
		t.Errorf("rebuilt index: %v %v", res, err)
	}
	entries, _ = os.ReadDir(cache)
	if len(entries) != 1 {
		t.Errorf("cache holds %v", entries)
	}
}

func TestConcurrentBuilders(t *testing.T) {
	cache := t.TempDir()
	corpus := writeCorpus(t, animals...)
	var wg sync.WaitGroup
	results := make([][]retriever.Hit, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ix, err := Open(context.Background(), corpus, cache, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer ix.Close()
			res, err := ix.Search(context.Background(), []string{"zebra"}, 3)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = res[0]
		}()
	}
	wg.Wait()
	for _, r := range results[1:] {
		if !reflect.DeepEqual(r, results[0]) {
			t.Errorf("builders disagree: %v vs %v", r, results[0])
		}
	}
	entries, _ := os.ReadDir(cache)
	if len(entries) != 1 || strings.HasPrefix(entries[0].Name(), buildPrefix) {
		t.Errorf("cache holds %v, want one finished entry", entries)
	}
}

func TestCancelledBuildLeavesNothing(t *testing.T) {
	var lines []string
	for i := range 2*batchSize + 10 {
		lines = append(lines, passage(fmt.Sprint(i), fmt.Sprint("T", i), "some filler text"))
	}
	corpus := writeCorpus(t, lines...)
	cache := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Open(ctx, corpus, cache, func(done, total int) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("cancelled build left %v", entries)
	}
}

func TestStaleBuildsRemoved(t *testing.T) {
	cache := t.TempDir()
	stale := filepath.Join(cache, buildPrefix+"0123456789abcdef-1")
	fresh := filepath.Join(cache, buildPrefix+"0123456789abcdef-2")
	for _, d := range []string{stale, fresh} {
		if err := os.MkdirAll(filepath.Join(d, "index"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "index", "seg"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleBuild)
	for _, p := range []string{filepath.Join(stale, "index", "seg"), filepath.Join(stale, "index"), stale} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	open(t, writeCorpus(t, animals...), cache)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale build dir kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh build dir removed: %v", err)
	}
}

func TestCorpusErrors(t *testing.T) {
	cases := []struct {
		name  string
		lines []string
		want  string
	}{
		{"not json", []string{animals[0], "", "{not json"}, ":3:"},
		{"no contents", []string{animals[0], `{"id": "x"}`}, `:2: corpus line lacks a string "contents"`},
		{"no id", []string{`{"contents": "x"}`}, `:1: corpus line lacks a string "id"`},
		{"numeric id", []string{`{"id": 7, "contents": "x"}`}, ":1:"},
		{"array", []string{`[1]`}, ":1:"},
		{"duplicate", []string{animals[0], animals[1], animals[0]}, `:3: duplicate id "z"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeCorpus(t, c.lines...)
			_, err := Open(context.Background(), path, t.TempDir(), nil)
			if err == nil || !strings.Contains(err.Error(), path+c.want) {
				t.Errorf("error %v; want it to contain %q", err, path+c.want)
			}
		})
	}
	if _, err := Open(context.Background(), writeCorpus(t, ""), t.TempDir(), nil); err == nil {
		t.Error("empty corpus accepted")
	}
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing"), t.TempDir(), nil); err == nil {
		t.Error("missing corpus accepted")
	}
}
