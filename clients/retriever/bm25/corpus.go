package bm25

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
)

// corpusLine is one line of a wiki-18 style JSONL corpus. Pointers tell a
// missing field from an empty one.
type corpusLine struct {
	ID       *string `json:"id"`
	Contents *string `json:"contents"`
}

// record is one corpus line read back.
type record struct {
	id, contents string
}

// readPassageAt reads passage ord of the corpus at path, offs being
// offsets.bin (passage ord's line starts at offs[ord], the next passage's
// at offs[ord+1]).
func readPassageAt(path string, offs []byte, ord uint32) (record, error) {
	f, err := os.Open(path)
	if err != nil {
		return record{}, err
	}
	defer f.Close()
	return readPassage(f, offs, ord)
}

// readPassage reads passage ord from the open corpus f (see
// readPassageAt). A line that is no longer a passage means the corpus
// changed under its index.
func readPassage(f *os.File, offs []byte, ord uint32) (record, error) {
	lo := binary.LittleEndian.Uint64(offs[8*int(ord):])
	hi := binary.LittleEndian.Uint64(offs[8*int(ord)+8:])
	if hi < lo || hi-lo > 1<<30 {
		return record{}, fmt.Errorf("corpus %s: passage %d has bad offsets %d-%d", f.Name(), ord, lo, hi)
	}
	buf := make([]byte, hi-lo)
	if _, err := f.ReadAt(buf, int64(lo)); err != nil {
		return record{}, fmt.Errorf("corpus %s: passage %d: %w (changed since its index was built?)", f.Name(), ord, err)
	}
	// The span runs to the next passage: blank lines may follow.
	if i := bytes.IndexByte(buf, '\n'); i >= 0 {
		buf = buf[:i]
	}
	id, contents, err := parseLine(buf)
	if err != nil {
		return record{}, fmt.Errorf("corpus %s: passage %d at byte %d: %w (changed since its index was built?)", f.Name(), ord, lo, err)
	}
	return record{id, contents}, nil
}
