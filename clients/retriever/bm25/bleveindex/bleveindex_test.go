package bleveindex

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The previous engine still builds and ranks: the benchmark compares the
// static index with it.
func TestBuildAndSearch(t *testing.T) {
	corpus := filepath.Join(t.TempDir(), "c.jsonl")
	body := `{"id": "z", "contents": "\"Zebra\"\nzebra zebra lion"}
{"id": "l", "contents": "\"Lion\"\nlion tiger tiger"}
{"id": "t", "contents": "\"Tiger\"\ntiger zebra"}
`
	if err := os.WriteFile(corpus, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ix, err := Open(context.Background(), corpus, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	res, err := ix.Search(context.Background(), []string{"zebra"}, 3)
	if err != nil || len(res[0]) != 2 || res[0][0].ID != "z" || res[0][1].ID != "t" || ix.Len() != 3 {
		t.Fatalf("%v %v", res, err)
	}
}

// variantCorpus writes n passages drawn from a small vocabulary (passage
// i also holds the word "uniq<i>") and returns its path.
func variantCorpus(t *testing.T, n int) string {
	t.Helper()
	words := strings.Fields("river mountain castle battle king queen song album film city island river war army ship star")
	var b strings.Builder
	for i := range n {
		var text []string
		for j := range 5 + i%7 {
			text = append(text, words[(i*7+j*3)%len(words)])
		}
		text = append(text, fmt.Sprintf("uniq%d", i))
		line, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("p%d", i), "contents": fmt.Sprintf("\"T%d\"\n%s", i, strings.Join(text, " "))})
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "c.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The options the benchmark compares: batch size and merging change only
// the segments (the same hits and scores), a query of distinct terms gets
// the same hits in either form, shards find every passage, and each
// setting has its own cache entry.
func TestOptions(t *testing.T) {
	ctx := context.Background()
	corpus := variantCorpus(t, 300)
	cache := t.TempDir()
	queries := []string{"river castle", "king queen song", "battle uniq17", "uniq299", "film star ship army"}
	base, err := OpenOptions(ctx, corpus, cache, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	if base.Segments() != 1 {
		t.Errorf("merged index: %d segments, want 1", base.Segments())
	}
	want, err := base.Search(ctx, queries, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{BatchSize: 7, NoMerge: true}, {BatchSize: 50}, {Terms: true}, {Shards: 3}, {Shards: 2, NoMerge: true, Terms: true}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			ix, err := OpenOptions(ctx, corpus, cache, o, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			if ix.Len() != 300 {
				t.Fatalf("%d passages", ix.Len())
			}
			if !o.NoMerge && ix.Segments() != o.shards() {
				t.Errorf("%d segments, want one per shard (%d)", ix.Segments(), o.shards())
			}
			if o.NoMerge && o.BatchSize == 7 && ix.Segments() < 2 {
				t.Errorf("%d segments after 43 batches unmerged, want several", ix.Segments())
			}
			got, err := ix.Search(ctx, queries, 5)
			if err != nil {
				t.Fatal(err)
			}
			for i, q := range queries {
				if o.Shards > 1 {
					// Each shard scores with its own document frequencies:
					// only the passage that alone holds a word is certain.
					if strings.HasPrefix(q, "uniq") && (len(got[i]) != 1 || got[i][0].ID != "p299") {
						t.Errorf("%q: %v", q, got[i])
					}
					continue
				}
				if len(got[i]) != len(want[i]) {
					t.Fatalf("%q: %d hits, want %d", q, len(got[i]), len(want[i]))
				}
				for j := range got[i] {
					if got[i][j].ID != want[i][j].ID || math.Abs(got[i][j].Score-want[i][j].Score) > 1e-9 {
						t.Errorf("%q hit %d: %s %.6f, want %s %.6f", q, j, got[i][j].ID, got[i][j].Score, want[i][j].ID, want[i][j].Score)
					}
				}
			}
		})
	}
	entries, _ := filepath.Glob(filepath.Join(cache, "*", markerFile))
	if len(entries) != 5 { // default (Terms shares it), batch7-unmerged, batch50, shards3, shards2-unmerged
		t.Errorf("%d cache entries, want 5: %v", len(entries), entries)
	}
	if _, err := OpenOptions(ctx, corpus, cache, Options{Shards: -1}, nil); err == nil {
		t.Error("negative shards accepted")
	}
}
