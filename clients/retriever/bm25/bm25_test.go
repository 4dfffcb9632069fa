package bm25

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
func open(t *testing.T, corpus, cacheDir string) (*Index, []Progress) {
	t.Helper()
	var calls []Progress
	ix, err := Open(context.Background(), corpus, cacheDir, func(p Progress) {
		calls = append(calls, p)
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
	if len(calls) == 0 || calls[len(calls)-1].Passages != 4 || calls[len(calls)-1].Stage != "index" {
		t.Errorf("progress calls %+v", calls)
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
	if st := ix.Stats(); st.Passages != 4 || st.Tokens != 15 || st.Params != PyseriniParams || st.IndexBytes == 0 || len(st.SHA256) != 64 {
		t.Errorf("stats %+v", st)
	}
}

// TestBM25 checks the scores against the formula computed by hand:
// Lucene's BM25 with Pyserini's k1 and b, the true average length, a
// query term counted as often as the query repeats it, and term frequency
// saturating below idf.
func TestBM25(t *testing.T) {
	ix, _ := open(t, writeCorpus(t, animals...), t.TempDir())
	const k1, b = 0.9, 0.4
	n, avg := 4.0, 15.0/4 // 15 terms in 4 passages
	idf := func(df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }
	bm25 := func(df, tf, length float64) float64 {
		return idf(df) * tf / (tf + k1*(1-b+b*length/avg))
	}
	for _, c := range []struct {
		query string
		want  []retriever.Hit
	}{
		{"zebra", []retriever.Hit{{ID: "z", Score: bm25(2, 3, 4)}, {ID: "t", Score: bm25(2, 1, 3)}}},
		{"zebra zebra", []retriever.Hit{{ID: "z", Score: 2 * bm25(2, 3, 4)}, {ID: "t", Score: 2 * bm25(2, 1, 3)}}},
		{"lion tiger", []retriever.Hit{{ID: "l", Score: bm25(2, 2, 4) + bm25(2, 2, 4)}, {ID: "t", Score: bm25(2, 2, 3)}, {ID: "z", Score: bm25(2, 1, 4)}}},
	} {
		res, err := ix.Search(context.Background(), []string{c.query}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(res[0]) != len(c.want) {
			t.Fatalf("%q: hits %+v", c.query, res[0])
		}
		for i, h := range res[0] {
			if h.ID != c.want[i].ID || math.Abs(h.Score-c.want[i].Score) > 1e-12*c.want[i].Score {
				t.Errorf("%q hit %d = %s %.12f, want %s %.12f", c.query, i, h.ID, h.Score, c.want[i].ID, c.want[i].Score)
			}
		}
	}

	// Saturation: a thousand repetitions score less than idf.
	many := strings.Repeat("gnu ", 1000)
	ix2, _ := open(t, writeCorpus(t, passage("1", "A", "gnu"), passage("2", "B", many), passage("3", "C", "x y"), passage("4", "D", "p q")), t.TempDir())
	res, err := ix2.Search(context.Background(), []string{"gnu"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range res[0] {
		if h.Score >= idf(2) || h.Score <= 0 {
			t.Errorf("score %f of %s not below idf %f", h.Score, h.ID, idf(2))
		}
	}
	// Other parameters are another index.
	ix3, err := OpenWith(context.Background(), writeCorpus(t, animals...), t.TempDir(), Params{K1: 1.2, B: 0.75}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ix3.Close()
	res, _ = ix3.Search(context.Background(), []string{"zebra"}, 1)
	want := idf(2) * 3 / (3 + 1.2*(1-0.75+0.75*4/avg))
	if math.Abs(res[0][0].Score-want) > 1e-12*want {
		t.Errorf("k1 1.2 b 0.75: %.12f, want %.12f", res[0][0].Score, want)
	}
	for _, p := range []Params{{K1: -1, B: 0.4}, {K1: 0.9, B: 1.5}, {K1: math.NaN(), B: 0.4}} {
		if _, err := OpenWith(context.Background(), writeCorpus(t, animals...), t.TempDir(), p, nil); err == nil {
			t.Errorf("params %+v accepted", p)
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
	if got := strings.Fields(BoundQuery(long)); len(got) != MaxQueryTerms {
		t.Errorf("%d terms, want %d", len(got), MaxQueryTerms)
	}
	runes := strings.Repeat("é", MaxQueryChars) // 2 bytes each
	got := BoundQuery(runes)
	if len(got) > MaxQueryChars || !strings.HasPrefix(runes, got) || len(got) == 0 {
		t.Errorf("cut to %d bytes", len(got))
	}
	if got := BoundQuery("  a \t b\n"); got != "a b" {
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
	entries := entryDirs(t, cache)
	if len(entries) != 1 {
		t.Fatalf("cache holds %d entries, want 1", len(entries))
	}
	marker := filepath.Join(cache, entries[0], markerFile)
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
	entries = entryDirs(t, cache)
	if len(entries) != 2 {
		t.Errorf("cache holds %d entries, want 2", len(entries))
	}
}

func TestDamagedEntryReplaced(t *testing.T) {
	cache := t.TempDir()
	corpus := writeCorpus(t, animals...)
	ix, _ := open(t, corpus, cache)
	ix.Close()
	entry := filepath.Join(cache, entryDirs(t, cache)[0])
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
	if e := entryDirs(t, cache); len(e) != 1 {
		t.Errorf("cache holds %v", e)
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
	if e := entryDirs(t, cache); len(e) != 1 || strings.HasPrefix(e[0], buildPrefix) {
		t.Errorf("cache holds %v, want one finished entry", e)
	}
}

// A build killed part way leaves its runs and state.json in the build
// directory and no entry; the next Open resumes after the last run (its
// first progress is past the start) and gives the index a build in one go
// gives, byte for byte.
func TestBuildResumesAfterKill(t *testing.T) {
	defer func(n int) { chunkDocs = n }(chunkDocs)
	chunkDocs = 300
	var lines []string
	for i := range 2000 {
		lines = append(lines, passage(fmt.Sprint(i), fmt.Sprint("T", i), fmt.Sprintf("filler text %d about w%d and w%d", i%7, i%13, i%31)))
	}
	corpus := writeCorpus(t, lines...)
	cache := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Open(ctx, corpus, cache, func(p Progress) {
		if p.Passages > 1000 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if e := entryDirs(t, cache); len(e) != 1 || !strings.HasPrefix(e[0], buildPrefix) {
		t.Fatalf("after the kill: %v, want only the build directory", e)
	}
	st, err := readState(filepath.Join(cache, entryDirs(t, cache)[0]))
	if err != nil || st.Runs < 1 || st.Docs >= 2000 || st.Docs < 300*st.Runs {
		t.Fatalf("state %+v %v", st, err)
	}
	ix, calls := open(t, corpus, cache)
	if len(calls) == 0 || calls[0].Passages <= st.Docs || calls[0].Done <= st.Offset || calls[0].From != st.Offset {
		t.Errorf("resumed from %+v; state was %d passages", calls, st.Docs)
	}
	freshCache := t.TempDir()
	fresh, _ := open(t, corpus, freshCache)
	if ix.Len() != 2000 || ix.Stats().SHA256 != fresh.Stats().SHA256 {
		t.Errorf("resumed: %+v, fresh %+v", ix.Stats(), fresh.Stats())
	}
	files := []string{dictFile, termsFile, postFile, offsFile, idsFile}
	var names []string
	es, _ := os.ReadDir(filepath.Join(cache, entryDirs(t, cache)[0]))
	for _, e := range es {
		names = append(names, e.Name())
	}
	if want := append([]string{markerFile}, files...); !sameSet(names, want) {
		t.Errorf("the entry holds %v, want %v (the runs and state.json gone)", names, want)
	}
	for _, name := range files {
		a, _ := os.ReadFile(filepath.Join(cache, entryDirs(t, cache)[0], name))
		b, _ := os.ReadFile(filepath.Join(freshCache, entryDirs(t, freshCache)[0], name))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: %d bytes resumed, %d fresh, or not the same", name, len(a), len(b))
		}
	}
	qs := []string{"filler w3", "text about w12 w30", "T77"}
	a, _ := ix.Search(context.Background(), qs, 5)
	b, _ := fresh.Search(context.Background(), qs, 5)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("resumed index answers %v, fresh %v", a, b)
	}
	if e := entryDirs(t, cache); len(e) != 1 || strings.HasPrefix(e[0], buildPrefix) {
		t.Errorf("cache holds %v, want one finished entry", e)
	}
}

// entryDirs lists the directories in cache (entries and builds; not the
// lock files).
func entryDirs(t *testing.T, cache string) []string {
	t.Helper()
	es, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
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

// An index whose postings were damaged on disk after it was built (same
// size, wrong bytes) answers an error naming its directory, not a crash;
// one whose files have the wrong size is rebuilt at open.
func TestDamagedPostingsAreAnError(t *testing.T) {
	cache := t.TempDir()
	corpus := writeCorpus(t, animals...)
	ix, _ := open(t, corpus, cache)
	ix.Close()
	post := filepath.Join(cache, entryDirs(t, cache)[0], postFile)
	st, err := os.Stat(post)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(post, bytes.Repeat([]byte{0xff}, int(st.Size())), 0o644); err != nil {
		t.Fatal(err)
	}
	ix, calls := open(t, corpus, cache)
	if len(calls) != 0 {
		t.Fatal("rebuilt: the sizes are right")
	}
	if _, err := ix.Search(context.Background(), []string{"zebra"}, 3); err == nil || !strings.Contains(err.Error(), "is damaged") {
		t.Errorf("search of damaged postings: %v", err)
	}
	ix.Close()
	if err := os.WriteFile(post, []byte{1, 2, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	ix, calls = open(t, corpus, cache)
	if res, err := ix.Search(context.Background(), []string{"zebra"}, 3); len(calls) == 0 || err != nil || len(res[0]) != 2 {
		t.Errorf("a truncated post.bin: rebuilt %v, %v %v", len(calls) > 0, res, err)
	}
}

// Blank lines after the last full batch of passages are read to the end
// of the corpus, not taken for a short read.
func TestTrailingBlankLines(t *testing.T) {
	var lines []string
	for i := range linesPerBatch {
		lines = append(lines, passage(fmt.Sprint(i), "T", "filler"))
	}
	lines = append(lines, "", "", "")
	ix, _ := open(t, writeCorpus(t, lines...), t.TempDir())
	if ix.Len() != linesPerBatch {
		t.Errorf("Len %d", ix.Len())
	}
	if c, ok := ix.Passage(fmt.Sprint(linesPerBatch - 1)); !ok || c != "\"T\"\nfiller" {
		t.Errorf("last passage %q %v", c, ok)
	}
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
