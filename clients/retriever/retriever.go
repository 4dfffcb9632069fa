// Package retriever is the client of the retriever role: the Search-R1
// retrieval server's POST /retrieve (PROTOCOLS.md §4), batched.
package retriever

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Retriever answers a batch of queries with the top-k passages of each.
type Retriever interface {
	// Retrieve returns, for each query in order, its hits best first.
	Retrieve(ctx context.Context, queries []string, topk int) ([][]Hit, error)
	// URL is the server's base URL.
	URL() string
}

// Hit is one retrieved passage.
type Hit struct {
	// ID is the corpus id of the passage as the server sent it, or, for a
	// document sent without one (Search-R1's BM25 retriever over an index
	// that stores the raw documents), SynthID(Contents). Nothing but
	// display reads it: the agent sees Contents, the trajectory records
	// keep titles and the retrieval cache is keyed by query.
	ID string `json:"id"`
	// IDFromContents is true when ID was made by SynthID.
	IDFromContents bool `json:"id_from_contents,omitempty"`
	// Contents is the corpus contents: a quoted title line, then the text.
	Contents string `json:"contents"`
	// Score is the retriever's score.
	Score float64 `json:"score"`
}

// SynthIDPrefix starts every id made by SynthID.
const SynthIDPrefix = "sha256:"

// SynthID is the id given to a document the server sent without one:
// SynthIDPrefix and the first 16 hex digits of the SHA-256 of its
// contents (the UTF-8 bytes after JSON decoding). It is stable across
// runs, servers and processes; equal contents get equal ids, and it cannot
// be mistaken for a wiki-18 id (a decimal number).
func SynthID(contents string) string {
	sum := sha256.Sum256([]byte(contents))
	return SynthIDPrefix + hex.EncodeToString(sum[:8])
}
