package bm25_test

import (
	"fmt"
	"strings"

	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
)

// A query is searched trimmed, its whitespace single spaces, and at most
// MaxQueryTerms words long.
func ExampleBoundQuery() {
	fmt.Printf("%q\n", bm25.BoundQuery("  who wrote\t the  Old Man and the Sea?\n"))
	long := strings.Repeat("word ", 100)
	fmt.Println(len(strings.Fields(bm25.BoundQuery(long))))
	// Output:
	// "who wrote the Old Man and the Sea?"
	// 64
}
