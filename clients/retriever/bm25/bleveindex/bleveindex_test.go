package bleveindex

import (
	"context"
	"os"
	"path/filepath"
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
