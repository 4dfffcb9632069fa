package bm25

import (
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
)

// The analyser is Bleve's "en": Unicode word segmentation (UAX #29),
// English possessives removed, lower case, Snowball's English stop list
// (174 words, Bleve's stop_en), the Porter stemmer (Bleve's porter). The
// embedded retriever's analyser from the start: docs/bench.md compares it
// with Lucene's EnglishAnalyzer, Pyserini's default.
var enAnalyzer = sync.OnceValue(func() analysis.Analyzer {
	return bleve.NewIndexMapping().AnalyzerNamed(en.AnalyzerName)
})

// termFreq is one analysed term of a text and its count there.
type termFreq struct {
	term string
	n    uint32
}

// analyze returns the distinct terms of text in order of first
// appearance with their counts, and the text's length in terms (stop
// words not counted, as Lucene does not count them either).
func analyze(text string) ([]termFreq, int) {
	toks := enAnalyzer().Analyze([]byte(text))
	if len(toks) == 0 {
		return nil, 0
	}
	at := make(map[string]int, len(toks))
	out := make([]termFreq, 0, len(toks))
	for _, t := range toks {
		if i, ok := at[string(t.Term)]; ok {
			out[i].n++
			continue
		}
		s := string(t.Term)
		at[s] = len(out)
		out = append(out, termFreq{s, 1})
	}
	return out, len(toks)
}

// Params are the BM25 parameters an index is built with.
type Params struct {
	// K1 saturates term frequency; B normalises by passage length.
	K1, B float64
}

// PyseriniParams are Pyserini's defaults (k1 0.9, b 0.4), this package's
// default.
var PyseriniParams = Params{K1: 0.9, B: 0.4}

// idf is Lucene's BM25 idf: ln(1 + (N − n + 0.5)/(n + 0.5)), N passages,
// n of them holding the term.
func idf(docs, df int) float64 {
	return math.Log(1 + (float64(docs)-float64(df)+0.5)/(float64(df)+0.5))
}

// norm is the length normalisation k1·(1 − b + b·len/avglen) of a passage
// of dl terms.
func (p Params) norm(dl uint32, avgdl float64) float64 {
	return p.K1 * (1 - p.B + p.B*float64(dl)/avgdl)
}

// sat is the saturated term frequency tf/(tf + norm): a term's score in a
// passage is its weight (query count × idf) times sat. Scores are
// weight·sat summed over the query's terms in the query's order, here and
// in the exhaustive scorer, so that both give the same bits.
func sat(tf uint32, norm float64) float64 {
	f := float64(tf)
	return f / (f + norm)
}

// BoundQuery is a query as the index searches it: trimmed, cut to
// MaxQueryChars bytes (at a character boundary) and to its first
// MaxQueryTerms whitespace-separated words, joined by single spaces.
func BoundQuery(text string) string {
	if len(text) > MaxQueryChars {
		cut := MaxQueryChars
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	words := strings.Fields(text)
	if len(words) > MaxQueryTerms {
		words = words[:MaxQueryTerms]
	}
	return strings.Join(words, " ")
}
