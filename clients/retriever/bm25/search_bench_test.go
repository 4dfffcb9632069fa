package bm25

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// shippedQuestions are the shipped benchmark questions, all seven sets.
func shippedQuestions(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob("../../../recipes/data/qa/*.jsonl")
	if err != nil || len(files) != 7 {
		tb.Fatalf("shipped question sets: %v %v", files, err)
	}
	var qs []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			tb.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r struct{ Question string }
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				tb.Fatalf("%s: %v", f, err)
			}
			qs = append(qs, r.Question)
		}
		fh.Close()
	}
	return qs
}

// BenchmarkSearch compares, side by side, MaxScore in windows with the
// exhaustive scorer (every posting of every term) on the shipped corpus
// and questions, top 3: read the ratio of the two, not either alone
// (`orchestrate bench --only retrieval` measures the served index at
// scale). Each op is one question.
func BenchmarkSearch(b *testing.B) {
	ix, err := Open(context.Background(), "../../../recipes/data/corpus/passages.jsonl", b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ix.Close()
	qs := shippedQuestions(b)
	for _, mode := range []struct {
		name       string
		exhaustive bool
	}{{"maxscore", false}, {"exhaustive", true}} {
		b.Run(mode.name, func(b *testing.B) {
			for i := range b.N {
				ix.search(qs[i%len(qs)], 3, mode.exhaustive)
			}
		})
	}
}
