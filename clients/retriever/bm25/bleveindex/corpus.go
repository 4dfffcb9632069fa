package bleveindex

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// corpus is the passages of a corpus file, in file order, and the sha256 of
// the file's bytes.
type corpus struct {
	ids      []string
	contents []string
	byID     map[string]int
	sha256   string
}

// corpusLine is one line of a wiki-18 style JSONL corpus. Pointers tell a
// missing field from an empty one.
type corpusLine struct {
	ID       *string `json:"id"`
	Contents *string `json:"contents"`
}

// readCorpus reads and hashes the corpus file at path in one pass. Blank
// lines are skipped; any other line must be a JSON object with string "id"
// and "contents", ids unique, or the error names path:line.
func readCorpus(path string) (*corpus, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read corpus: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	r := bufio.NewReaderSize(io.TeeReader(f, h), 1<<20)
	c := &corpus{byID: map[string]int{}}
	for n := 1; ; n++ {
		line, rerr := r.ReadBytes('\n')
		if rerr != nil && rerr != io.EOF {
			return nil, fmt.Errorf("read corpus %s:%d: %w", path, n, rerr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if err := c.add(line); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
		}
		if rerr == io.EOF {
			break
		}
	}
	if len(c.ids) == 0 {
		return nil, fmt.Errorf("read corpus %s: no passages", path)
	}
	c.sha256 = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// add appends the passage on one corpus line.
func (c *corpus) add(line []byte) error {
	var p corpusLine
	if err := json.Unmarshal(line, &p); err != nil {
		return fmt.Errorf("bad corpus line: %w", err)
	}
	switch {
	case p.ID == nil:
		return errors.New("corpus line lacks a string \"id\"")
	case p.Contents == nil:
		return errors.New("corpus line lacks a string \"contents\"")
	}
	if first, dup := c.byID[*p.ID]; dup {
		return fmt.Errorf("duplicate id %q (first at passage %d)", *p.ID, first+1)
	}
	c.byID[*p.ID] = len(c.ids)
	c.ids = append(c.ids, *p.ID)
	c.contents = append(c.contents, *p.Contents)
	return nil
}
