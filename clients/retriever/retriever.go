// Package retriever is the client of the retriever role: the Search-R1
// retrieval server's POST /retrieve (PROTOCOLS.md §4), batched.
package retriever

import "context"

// Retriever answers a batch of queries with the top-k passages of each.
type Retriever interface {
	// Retrieve returns, for each query in order, its hits best first.
	Retrieve(ctx context.Context, queries []string, topk int) ([][]Hit, error)
	// URL is the server's base URL.
	URL() string
}

// Hit is one retrieved passage.
type Hit struct {
	// ID is the corpus id of the passage.
	ID string `json:"id"`
	// Contents is the corpus contents: a quoted title line, then the text.
	Contents string `json:"contents"`
	// Score is the retriever's score.
	Score float64 `json:"score"`
}
