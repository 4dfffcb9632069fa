package bm25

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// bruteCorpus is a corpus analysed from first principles, for the
// brute-force scorer. It shares only the analyser and the two formula
// helpers with the index.
type bruteCorpus struct {
	docs []bruteDoc
	df   map[string]int
	avg  float64
}

type bruteDoc struct {
	tf map[string]uint32
	dl int
}

func newBrute(texts []string) *bruteCorpus {
	c := &bruteCorpus{df: map[string]int{}}
	total := 0
	for _, t := range texts {
		terms, dl := analyze(t)
		d := bruteDoc{map[string]uint32{}, dl}
		for _, x := range terms {
			d.tf[x.term] = x.n
			c.df[x.term]++
		}
		c.docs = append(c.docs, d)
		total += dl
	}
	c.avg = float64(total) / float64(len(texts))
	return c
}

// top scores every passage for query: Lucene's BM25 with p, the query's
// distinct terms summed in the order they first occur, ties by corpus
// order.
func (c *bruteCorpus) top(p Params, query string, k int) []scored {
	q, _ := analyze(BoundQuery(query))
	var out []scored
	for i, d := range c.docs {
		norm := p.norm(uint32(d.dl), c.avg)
		s, hit := 0.0, false
		for _, t := range q {
			if tf, ok := d.tf[t.term]; ok {
				s += float64(t.n) * idf(len(c.docs), c.df[t.term]) * sat(tf, norm)
				hit = true
			}
		}
		if hit {
			out = append(out, scored{uint32(i), s})
		}
	}
	slices.SortStableFunc(out, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	return out[:min(k, len(out))]
}

// zipf draws words of a Zipf-like vocabulary: a few very common, many
// rare, so that lists are long and short and MaxScore prunes.
func randomText(r *rand.Rand, vocab []string, n int) string {
	z := rand.NewZipf(r, 1.1, 2, uint64(len(vocab)-1))
	w := make([]string, n)
	for i := range w {
		w[i] = vocab[z.Uint64()]
	}
	return strings.Join(w, " ")
}

// TestExactAgainstBruteForce: on random corpora (many runs merged, blocks
// of every fill, passages repeated word for word so that scores tie), the
// top k of MaxScore (in windows of the default size and of 64 passages,
// so that many windows, skips and blocks across windows are crossed), and
// of the exhaustive path,
// equal the brute-force scorer's on thousands of random queries: the same
// passages in the same order with the same scores, to the bit.
func TestExactAgainstBruteForce(t *testing.T) {
	defer func(n, w int) { chunkDocs, window = n, w }(chunkDocs, window)
	chunkDocs = 700
	r := rand.New(rand.NewPCG(7, 11))
	vocab := make([]string, 400)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%dq", i) // not stop words, not stemmed apart
	}
	vocab[3], vocab[9] = "the", "running" // a stop word and a stemmed one
	var texts, lines []string
	for i := range 3000 {
		text := randomText(r, vocab, 5+r.IntN(120))
		if i%10 == 9 {
			text = texts[r.IntN(len(texts))] // a twin: equal scores
		}
		texts = append(texts, text)
		lines = append(lines, fmt.Sprintf(`{"id": "p%d", "contents": %q}`, i, text))
	}
	queries := 1000 // per parameter set
	if testing.Short() {
		queries = 200
	}
	brute := newBrute(texts)
	for _, p := range []Params{PyseriniParams, {K1: 1.2, B: 0.75}, {K1: 0, B: 0}} {
		ix, err := OpenWith(context.Background(), writeCorpus(t, lines...), t.TempDir(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ix.Close()
		for q := range queries {
			query := randomText(r, vocab, 1+r.IntN(8))
			if q%50 == 0 {
				query += " unknownword"
			}
			k := []int{1, 3, 10, 50}[q%4]
			want := brute.top(p, query, k)
			for _, mode := range []struct {
				exhaustive bool
				window     int
			}{{false, 2048}, {false, 64}, {true, 2048}} {
				window = mode.window
				got := ix.search(query, k, mode.exhaustive)
				if len(got) != len(want) {
					t.Fatalf("%+v %q k %d %+v: %d hits, want %d", p, query, k, mode, len(got), len(want))
				}
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%+v %q k %d %+v: hit %d = %+v, want %+v", p, query, k, mode, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// Twins tie: every twin of a passage scores the same, and the earliest
// come first, at every k.
func TestTiesAcrossBlocks(t *testing.T) {
	var lines []string
	for i := range 1000 {
		text := "alpha beta"
		if i%3 == 0 {
			text = "alpha gamma delta"
		}
		lines = append(lines, fmt.Sprintf(`{"id": "%d", "contents": %q}`, i, text))
	}
	ix, _ := open(t, writeCorpus(t, lines...), t.TempDir())
	for _, k := range []int{1, 2, 129, 500} {
		got := ix.search("alpha beta", k, false)
		for i := range got {
			if want := uint32(i + 1 + i/2); got[i].doc != want || got[i].score != got[0].score {
				t.Fatalf("k %d: hit %d = %+v, want passage %d at %v", k, i, got[i], want, got[0].score)
			}
		}
	}
	if math.IsNaN(ix.search("alpha", 1, false)[0].score) {
		t.Error("NaN")
	}
}

// Every width of every field decodes as the build encoded it: gaps,
// counts and lengths needing one to four bytes, mixed at random within
// blocks (a block takes its largest's width), blocks of one-byte fields
// only, and a last block of every fill.
func TestDecodeForms(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	// Values needing 1, 2, 3 and 4 bytes.
	sized := func(bytes int) uint32 {
		lo := []uint32{0, 1 << 8, 1 << 16, 1 << 24}[bytes-1]
		hi := []uint32{1<<8 - 1, 1<<16 - 1, 1<<24 - 1, 1<<31 - 1}[bytes-1]
		return lo + r.Uint32N(hi-lo+1)
	}
	for trial := range 300 {
		n := 1 + r.IntN(5*blockSize)
		// How often a field is longer than one byte: never (the
		// branch-free loop), sometimes, or always.
		long := []float64{0, 0.02, 0.3, 1}[trial%4]
		field := func(minimum uint32) uint32 {
			if r.Float64() >= long {
				return max(minimum, sized(1))
			}
			return max(minimum, sized(1+r.IntN(2)+r.IntN(2)*r.IntN(3)))
		}
		docs, tfs, lens := make([]uint32, n), make([]uint32, n), map[uint32]uint32{}
		prev := uint32(0)
		for i := range n {
			gap := field(1)
			if i == 0 {
				gap = field(0)
			}
			if uint64(prev)+uint64(gap) >= 1<<31 {
				gap = 1
			}
			prev += gap
			docs[i], tfs[i] = prev, field(1)
			lens[prev] = field(1)
		}
		hdr, data, _ := appendList(nil, nil, docs, tfs, func(d uint32) uint32 { return lens[d] },
			func(tf, dl uint32) float64 { return float64(tf) / float64(tf+dl) })
		nb := (n + blockSize - 1) / blockSize
		c := &cursor{hdr: hdr, data: data, nb: nb}
		c.decode(0)
		for i := range n {
			if c.doc != docs[i] || c.tfs[c.i] != tfs[i] || c.dls[c.i] != lens[docs[i]] {
				t.Fatalf("trial %d (long %v), posting %d of %d: passage %d tf %d len %d, want %d %d %d",
					trial, long, i, n, c.doc, c.tfs[c.i], c.dls[c.i], docs[i], tfs[i], lens[docs[i]])
			}
			c.next()
		}
		if c.doc != endDoc {
			t.Fatalf("trial %d: a posting past the last: %d", trial, c.doc)
		}
	}
}
