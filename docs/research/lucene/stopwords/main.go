// Command stopwords prints the stop list of the embedded retriever's
// analyser (Bleve's "en": Snowball's English list, 174 words, in
// Snowball's format) for LuceneBM25Bench's -Dstop, so that Lucene can be
// measured with the same stop words (docs/bench.md, "Lucene").
package main

import (
	"os"

	"github.com/blevesearch/bleve/v2/analysis/lang/en"
)

func main() {
	os.Stdout.Write(en.EnglishStopWords)
}
