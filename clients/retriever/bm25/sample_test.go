package bm25

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// samplePath is the project's sample corpus (12.6k HotpotQA, 2Wiki and
// MuSiQue passages).
var samplePath = filepath.Join("..", "..", "..", "recipes", "data", "corpus", "passages.jsonl")

// The sample index is built once per test binary, in a temp dir that
// TestMain removes.
var (
	sampleOnce  sync.Once
	sampleIndex *Index
	sampleErr   error
	sampleDir   string
	sampleBuild time.Duration
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sampleIndex != nil {
		sampleIndex.Close()
	}
	if sampleDir != "" {
		os.RemoveAll(sampleDir)
	}
	os.Exit(code)
}

// sample returns the index of the sample corpus.
func sample(t *testing.T) *Index {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("builds the sample corpus's index (2 s); skipped in -short mode")
	case raceEnabled:
		// The build path is race-tested on the small corpora; under the
		// race detector this build takes half a minute.
		t.Skip("builds the sample corpus's index; skipped under -race")
	}
	if _, err := os.Stat(samplePath); err != nil {
		t.Skipf("no sample corpus: %v", err)
	}
	sampleOnce.Do(func() {
		sampleDir, sampleErr = os.MkdirTemp("", "bm25-sample-")
		if sampleErr != nil {
			return
		}
		start := time.Now()
		sampleIndex, sampleErr = Open(context.Background(), samplePath, sampleDir, nil)
		sampleBuild = time.Since(start)
	})
	if sampleErr != nil {
		t.Fatal(sampleErr)
	}
	return sampleIndex
}

func TestSampleCorpus(t *testing.T) {
	ix := sample(t)
	t.Logf("sample corpus: %d passages, opened (built) in %v", ix.Len(), sampleBuild)
	if ix.Len() != 12596 {
		t.Errorf("Len %d, want 12596", ix.Len())
	}
	queries := []string{
		"Oplismenus",
		// HotpotQA 5ae207a65542994d89d5b317; supporting titles Lavatera
		// and Oplismenus.
		"In which genus number of species are more, Lavatera or Oplismenus?",
		// HotpotQA 5ab9374b554299131ca422c6.
		"Which man who presented the Australia 2022 FIFA World Cup bid was born on October 22, 1930?",
	}
	res, err := ix.Search(context.Background(), queries, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(res[0]) == 0 || !strings.HasPrefix(res[0][0].Contents, "\"Oplismenus\"\n") {
		t.Errorf("Oplismenus: first hit %v", res[0])
	}
	for _, want := range []struct {
		query int
		title string
	}{{1, "Oplismenus"}, {1, "Lavatera"}, {2, "Australia 2022 FIFA World Cup bid"}} {
		found := false
		for _, h := range res[want.query] {
			found = found || strings.HasPrefix(h.Contents, "\""+want.title+"\"\n")
		}
		if !found {
			t.Errorf("query %q: %q not in the top 3 %v", queries[want.query], want.title, ids(res[want.query]))
		}
	}
}
