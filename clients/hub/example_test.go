package hub_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hindsearch/hindsearch/clients/hub"
)

// The sha256 of a file's bytes, as the hub names an LFS file.
func ExampleFileSHA256() {
	p := filepath.Join(os.TempDir(), "hub-example-sha256.txt")
	defer os.Remove(p)
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		panic(err)
	}
	sum, err := hub.FileSHA256(p)
	fmt.Println(sum, err)
	// Output: ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad <nil>
}
