package bm25

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
)

// The index of a corpus is built in two passes, in the entry's build
// directory (cacheDir/.build-<entry>), which survives a kill:
//
//  1. The corpus is read in order, each passage analysed (GOMAXPROCS
//     workers), and every chunkDocs passages the chunk's postings are
//     written as a sorted run (run-NNNNN.bin) beside its passages' lengths,
//     line offsets and id hashes; state.json then records where the corpus
//     was left (offset, line, passages, tokens, the sha256 so far). A
//     resumed build continues from there.
//  2. The runs are merged term by term into the index's files; the merge
//     is redone from the runs if it was killed.
//
// Memory is bounded by one chunk's postings (about chunkDocs × 75 terms
// × 8 bytes, and the Go heap's headroom), the passages' lengths (4 bytes
// each) and, for the duplicate id check, their id hashes (12 bytes each),
// whatever the corpus's size on disk (docs/bench.md has the measured peak).

const (
	// formatVersion changes whenever the index layout does, so that an
	// index cached by an older version is rebuilt.
	formatVersion = 5
	// blockSize is the postings per block: each block has its last
	// passage and its best saturated term frequency in the term's block
	// table, so that a search skips blocks without decoding them.
	blockSize = 128
	// dictRecord is the size of a term's record in dict.bin.
	dictRecord = 32
	// idRecord is the size of a passage's record in ids.bin.
	idRecord = 12

	markerFile = "complete.json"
	stateFile  = "state.json"
	dictFile   = "dict.bin"
	termsFile  = "terms.bin"
	postFile   = "post.bin"
	offsFile   = "offsets.bin"
	idsFile    = "ids.bin"

	// buildPrefix starts the names of build directories inside cacheDir.
	buildPrefix = ".build-"
	// staleBuild is how long another entry's build directory may go
	// unmodified before Open treats it as abandoned and removes it.
	staleBuild = 24 * time.Hour
	// linesPerBatch is the corpus lines a worker analyses at a time.
	linesPerBatch = 256
)

// chunkDocs is the passages per run (a variable for the tests).
var chunkDocs = 1 << 18

// Progress is where a build stands: Stage "index" reads the corpus (Done
// and Total its bytes, Passages so far), Stage "merge" merges the runs
// (Done and Total their bytes).
// From is where this run of the stage started (a resumed build's index
// stage starts where the killed one left off).
type Progress struct {
	Stage       string
	Done, Total int64
	From        int64
	Passages    int
}

// marker is the content of complete.json: what the entry is an index of.
type marker struct {
	Version      int     `json:"version"`
	Fingerprint  string  `json:"fingerprint"`
	Size         int64   `json:"size"`
	SHA256       string  `json:"sha256"`
	Docs         int     `json:"docs"`
	Tokens       int64   `json:"tokens"`
	Terms        int     `json:"terms"`
	Postings     int64   `json:"postings"`
	PostBytes    int64   `json:"post_bytes"`
	K1           float64 `json:"k1"`
	B            float64 `json:"b"`
	BuiltAt      string  `json:"built_at"`
	BuildSeconds float64 `json:"build_seconds"`
}

// buildState is state.json: the runs written so far and where the corpus
// was left after them.
type buildState struct {
	Version     int     `json:"version"`
	Fingerprint string  `json:"fingerprint"`
	K1          float64 `json:"k1"`
	B           float64 `json:"b"`
	Runs        int     `json:"runs"`
	Docs        int     `json:"docs"`
	Tokens      int64   `json:"tokens"`
	Offset      int64   `json:"offset"`
	Line        int     `json:"line"`
	Hash        []byte  `json:"hash"`
	Seconds     float64 `json:"seconds"`
}

// builder builds one entry.
type builder struct {
	corpus   string
	size     int64
	fp       string
	p        Params
	dir      string // the build directory
	progress func(Progress)
	st       buildState
	start    time.Time
}

// parsed is one analysed corpus line.
type parsed struct {
	id    string
	off   int64
	dl    uint32
	terms []termFreq
}

// batch is consecutive corpus lines, then their analyses.
type batch struct {
	seq   int
	lines [][]byte
	offs  []int64
	nos   []int
	docs  []parsed
	err   error
	end   int64 // the offset after the batch's last line
	endNo int
	raw   []byte // every byte of the batch's lines, blank ones too: hashed in order
}

// build makes the entry's files in b.dir, resuming from state.json when
// it is there and of this corpus, and writes the marker last.
func (b *builder) build(ctx context.Context) error {
	b.start = time.Now()
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return err
	}
	if st, err := readState(b.dir); err == nil && st.Version == formatVersion && st.Fingerprint == b.fp && st.K1 == b.p.K1 && st.B == b.p.B {
		b.st = st
	} else {
		b.st = buildState{Version: formatVersion, Fingerprint: b.fp, K1: b.p.K1, B: b.p.B}
	}
	if b.st.Offset < b.size {
		if err := b.index(ctx); err != nil {
			return err
		}
	}
	return b.merge(ctx)
}

func readState(dir string) (buildState, error) {
	var st buildState
	raw, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(raw, &st)
	return st, err
}

func runName(kind string, i int) string { return fmt.Sprintf("%s-%05d.bin", kind, i) }

// index is the first pass: from the state's offset to the end of the
// corpus, a run every chunkDocs passages.
func (b *builder) index(ctx context.Context) error {
	f, err := os.Open(b.corpus)
	if err != nil {
		return fmt.Errorf("read corpus: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(b.st.Offset, io.SeekStart); err != nil {
		return fmt.Errorf("read corpus: %w", err)
	}
	h := sha256.New()
	if len(b.st.Hash) > 0 {
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(b.st.Hash); err != nil {
			return fmt.Errorf("bm25 build state: %w", err)
		}
	}
	// Runs past the state's are a killed chunk's: written again.
	for i := b.st.Runs; ; i++ {
		gone := false
		for _, k := range []string{"run", "lens", "offs", "ids"} {
			if os.Remove(filepath.Join(b.dir, runName(k, i))) == nil {
				gone = true
			}
		}
		if !gone {
			break
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	done := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	var readErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the reader: lines in order
		defer wg.Done()
		defer close(batches)
		r := bufio.NewReaderSize(f, 1<<20)
		off, no := b.st.Offset, b.st.Line
		for seq := 0; ; seq++ {
			bt := &batch{seq: seq}
			for len(bt.lines) < linesPerBatch {
				line, err := r.ReadBytes('\n')
				if len(line) > 0 {
					no++
					bt.raw = append(bt.raw, line...)
					if len(bytes.TrimSpace(line)) > 0 {
						bt.lines = append(bt.lines, line)
						bt.offs = append(bt.offs, off)
						bt.nos = append(bt.nos, no)
					}
					off += int64(len(line))
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					readErr = fmt.Errorf("read corpus %s:%d: %w", b.corpus, no+1, err)
					return
				}
			}
			// Sent even without a passage (blank lines to the end): its
			// end is where the corpus was read to.
			bt.end, bt.endNo = off, no
			select {
			case batches <- bt:
			case <-ctx.Done():
				return
			}
			if off >= b.size {
				return
			}
		}
	}()
	workers := runtime.GOMAXPROCS(0)
	var ww sync.WaitGroup
	for range workers {
		ww.Add(1)
		go func() {
			defer ww.Done()
			for bt := range batches {
				for i, line := range bt.lines {
					id, contents, err := parseLine(line)
					if err != nil {
						bt.err = fmt.Errorf("%s:%d: %w", b.corpus, bt.nos[i], err)
						break
					}
					terms, dl := analyze(contents)
					bt.docs = append(bt.docs, parsed{id: id, off: bt.offs[i], dl: uint32(dl), terms: terms})
				}
				bt.lines = nil
				select {
				case done <- bt:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() { ww.Wait(); close(done) }()
	defer func() { cancel(); wg.Wait(); ww.Wait() }()

	from := b.st.Offset
	ch := newChunk(b.st.Docs)
	pending := map[int]*batch{}
	next := 0
	flush := func(end int64, endNo int) error {
		if err := ch.write(b.dir, b.st.Runs); err != nil {
			return fmt.Errorf("bm25 build: %w", err)
		}
		hs, err := h.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			return err
		}
		b.st.Runs++
		b.st.Docs += len(ch.lens)
		b.st.Tokens += ch.tokens
		b.st.Offset, b.st.Line, b.st.Hash = end, endNo, hs
		b.st.Seconds += time.Since(b.start).Seconds()
		b.start = time.Now()
		if err := writeJSONSync(filepath.Join(b.dir, stateFile), b.st); err != nil {
			return fmt.Errorf("bm25 build: %w", err)
		}
		ch = newChunk(b.st.Docs)
		return nil
	}
	var lastEnd int64
	var lastNo int
	for bt := range done {
		pending[bt.seq] = bt
		for {
			bt, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if bt.err != nil {
				return bt.err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			h.Write(bt.raw)
			for i := range bt.docs {
				ch.add(&bt.docs[i])
			}
			lastEnd, lastNo = bt.end, bt.endNo
			if b.progress != nil {
				b.progress(Progress{Stage: "index", Done: bt.end, Total: b.size, From: from, Passages: b.st.Docs + len(ch.lens)})
			}
			if len(ch.lens) >= chunkDocs {
				if err := flush(bt.end, bt.endNo); err != nil {
					return err
				}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	if lastEnd < b.size {
		return fmt.Errorf("read corpus %s: stopped at byte %d of %d", b.corpus, lastEnd, b.size)
	}
	if len(ch.lens) > 0 || b.st.Offset < b.size {
		if err := flush(lastEnd, lastNo); err != nil {
			return err
		}
	}
	if b.st.Docs == 0 {
		return fmt.Errorf("read corpus %s: no passages", b.corpus)
	}
	return nil
}

// parseLine reads one corpus line's id and contents.
func parseLine(line []byte) (id, contents string, err error) {
	var p corpusLine
	if err := json.Unmarshal(line, &p); err != nil {
		return "", "", fmt.Errorf("bad corpus line: %w", err)
	}
	switch {
	case p.ID == nil:
		return "", "", errors.New("corpus line lacks a string \"id\"")
	case p.Contents == nil:
		return "", "", errors.New("corpus line lacks a string \"contents\"")
	}
	return *p.ID, *p.Contents, nil
}

// chunk is the postings of consecutive passages, from passage base on.
type chunk struct {
	base   int
	post   map[string]*plist
	lens   []uint32
	offs   []int64
	ids    []idEntry
	tokens int64
}

type plist struct{ docs, tfs []uint32 }

// idEntry is a passage's id hash and ordinal (ids.bin, sorted).
type idEntry struct {
	h   uint64
	ord uint32
}

// put writes e as an ids.bin record (idRecord bytes: hash, ordinal).
func (e idEntry) put(b []byte) {
	binary.LittleEndian.PutUint64(b, e.h)
	binary.LittleEndian.PutUint32(b[8:], e.ord)
}

// idAt reads the ids.bin record at b.
func idAt(b []byte) idEntry {
	return idEntry{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:])}
}

func newChunk(base int) *chunk { return &chunk{base: base, post: map[string]*plist{}} }

func idHash(id string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(id))
	return f.Sum64()
}

func (c *chunk) add(d *parsed) {
	ord := uint32(c.base + len(c.lens))
	for _, t := range d.terms {
		p := c.post[t.term]
		if p == nil {
			p = &plist{}
			c.post[t.term] = p
		}
		p.docs = append(p.docs, ord)
		p.tfs = append(p.tfs, t.n)
	}
	c.lens = append(c.lens, d.dl)
	c.offs = append(c.offs, d.off)
	c.ids = append(c.ids, idEntry{idHash(d.id), ord})
	c.tokens += int64(d.dl)
}

// write writes run i: the sorted terms with their postings (uvarint
// passage deltas and counts), and the passages' lengths, offsets and id
// hashes, each file synced.
func (c *chunk) write(dir string, i int) error {
	terms := make([]string, 0, len(c.post))
	for t := range c.post {
		terms = append(terms, t)
	}
	slices.Sort(terms)
	err := writeSync(filepath.Join(dir, runName("run", i)), func(w *bufio.Writer) error {
		var buf []byte
		for _, t := range terms {
			p := c.post[t]
			buf = binary.AppendUvarint(buf[:0], uint64(len(t)))
			buf = append(buf, t...)
			buf = binary.AppendUvarint(buf, uint64(len(p.docs)))
			prev := uint32(0)
			for j, d := range p.docs {
				buf = binary.AppendUvarint(buf, uint64(d-prev))
				buf = binary.AppendUvarint(buf, uint64(p.tfs[j]))
				prev = d
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = writeSync(filepath.Join(dir, runName("lens", i)), func(w *bufio.Writer) error {
			var b [8]byte
			for _, l := range c.lens {
				binary.LittleEndian.PutUint32(b[:], l)
				w.Write(b[:4])
			}
			return nil
		})
	}
	if err == nil {
		err = writeSync(filepath.Join(dir, runName("offs", i)), func(w *bufio.Writer) error {
			var b [8]byte
			for _, o := range c.offs {
				binary.LittleEndian.PutUint64(b[:], uint64(o))
				w.Write(b[:])
			}
			return nil
		})
	}
	if err == nil {
		err = writeSync(filepath.Join(dir, runName("ids", i)), func(w *bufio.Writer) error {
			var b [idRecord]byte
			for _, e := range c.ids {
				e.put(b[:])
				w.Write(b[:])
			}
			return nil
		})
	}
	return err
}

// writeSync writes path through a buffered writer and syncs it.
func writeSync(path string, fill func(w *bufio.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeJSONSync writes v as JSON to path by way of a temporary file.
func writeJSONSync(path string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := writeSync(tmp, func(w *bufio.Writer) error { _, err := w.Write(raw); return err }); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

// merge is the second pass: the runs' postings into blocks, the per-
// passage files concatenated, the id hashes sorted and checked, then the
// marker.
func (b *builder) merge(ctx context.Context) error {
	st := b.st
	// The passages' lengths, for the postings (inline) and the block
	// bests; not kept after the build.
	lens := make([]uint32, 0, st.Docs)
	var err error
	for i := range st.Runs {
		raw, rerr := os.ReadFile(filepath.Join(b.dir, runName("lens", i)))
		if rerr != nil {
			err = rerr
			break
		}
		for j := 0; j+4 <= len(raw); j += 4 {
			lens = append(lens, binary.LittleEndian.Uint32(raw[j:]))
		}
	}
	if err == nil && len(lens) != st.Docs {
		err = fmt.Errorf("the runs hold %d passage lengths, want %d", len(lens), st.Docs)
	}
	if err == nil {
		err = writeSync(filepath.Join(b.dir, offsFile), func(w *bufio.Writer) error {
			for i := range st.Runs {
				raw, err := os.ReadFile(filepath.Join(b.dir, runName("offs", i)))
				if err != nil {
					return err
				}
				w.Write(raw)
			}
			var e [8]byte
			binary.LittleEndian.PutUint64(e[:], uint64(b.size))
			w.Write(e[:])
			return nil
		})
	}
	if err == nil {
		err = b.mergeIDs()
	}
	if err != nil {
		return fmt.Errorf("bm25 build: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	avgdl := float64(st.Tokens) / float64(st.Docs)
	if st.Tokens == 0 {
		avgdl = 1
	}
	terms, postings, postBytes, err := b.mergeRuns(ctx, lens, avgdl)
	if err != nil {
		return err
	}
	hs := sha256.New()
	if err := hs.(encoding.BinaryUnmarshaler).UnmarshalBinary(st.Hash); err != nil {
		return fmt.Errorf("bm25 build state: %w", err)
	}
	m := marker{
		Version: formatVersion, Fingerprint: b.fp, Size: b.size, SHA256: fmt.Sprintf("%x", hs.Sum(nil)),
		Docs: st.Docs, Tokens: st.Tokens, Terms: terms, Postings: postings, PostBytes: postBytes, K1: b.p.K1, B: b.p.B,
		BuiltAt:      time.Now().UTC().Format(time.RFC3339),
		BuildSeconds: st.Seconds + time.Since(b.start).Seconds(),
	}
	if err := writeJSONSync(filepath.Join(b.dir, markerFile), m); err != nil {
		return fmt.Errorf("bm25 build: %w", err)
	}
	// Only now: a kill before the marker merges the runs again.
	for i := range st.Runs {
		for _, k := range []string{"run", "lens", "offs", "ids"} {
			os.Remove(filepath.Join(b.dir, runName(k, i)))
		}
	}
	os.Remove(filepath.Join(b.dir, stateFile))
	return nil
}

// mergeIDs sorts the passages' id hashes into ids.bin, refusing a
// repeated id (naming the corpus line of its second use).
func (b *builder) mergeIDs() error {
	ids := make([]idEntry, 0, b.st.Docs)
	for i := range b.st.Runs {
		raw, err := os.ReadFile(filepath.Join(b.dir, runName("ids", i)))
		if err != nil {
			return err
		}
		for j := 0; j+idRecord <= len(raw); j += idRecord {
			ids = append(ids, idAt(raw[j:]))
		}
	}
	slices.SortFunc(ids, func(a, b idEntry) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.ord, b.ord)
	})
	var offs []byte
	for i := 1; i < len(ids); i++ {
		if ids[i].h != ids[i-1].h {
			continue
		}
		if offs == nil {
			raw, err := os.ReadFile(filepath.Join(b.dir, offsFile))
			if err != nil {
				return err
			}
			offs = raw
		}
		// The same hash: the same id, or a collision.
		for j := i - 1; j >= 0 && ids[j].h == ids[i].h; j-- {
			a, aerr := readPassageAt(b.corpus, offs, ids[j].ord)
			c, cerr := readPassageAt(b.corpus, offs, ids[i].ord)
			if aerr != nil || cerr != nil {
				return errors.Join(aerr, cerr)
			}
			if a.id == c.id {
				line, _ := lineOf(b.corpus, int64(binary.LittleEndian.Uint64(offs[8*int(ids[i].ord):])))
				return fmt.Errorf("%s:%d: duplicate id %q (first at passage %d)", b.corpus, line, c.id, ids[j].ord+1)
			}
		}
	}
	return writeSync(filepath.Join(b.dir, idsFile), func(w *bufio.Writer) error {
		var r [idRecord]byte
		for _, e := range ids {
			e.put(r[:])
			w.Write(r[:])
		}
		return nil
	})
}

// lineOf is the 1-based line number of the byte at off in path.
func lineOf(path string, off int64) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(io.LimitReader(f, off), 1<<20)
	n := 1
	buf := make([]byte, 1<<16)
	for {
		k, err := r.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err != nil {
			return n, nil
		}
	}
}

// runReader reads one run's terms in order.
type runReader struct {
	i    int
	r    *bufio.Reader
	f    *os.File
	in   *countReader
	term string
	n    int
}

// countReader counts the bytes read through it (from a run file: the
// merge's progress).
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (rr *runReader) nextTerm() (bool, error) {
	l, err := binary.ReadUvarint(rr.r)
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	t := make([]byte, l)
	if _, err := io.ReadFull(rr.r, t); err != nil {
		return false, err
	}
	n, err := binary.ReadUvarint(rr.r)
	if err != nil {
		return false, err
	}
	rr.term, rr.n = string(t), int(n)
	return true, nil
}

func (rr *runReader) appendList(docs, tfs []uint32) ([]uint32, []uint32, error) {
	prev := uint64(0)
	for range rr.n {
		d, err := binary.ReadUvarint(rr.r)
		if err != nil {
			return nil, nil, err
		}
		tf, err := binary.ReadUvarint(rr.r)
		if err != nil {
			return nil, nil, err
		}
		prev += d
		docs, tfs = append(docs, uint32(prev)), append(tfs, uint32(tf))
	}
	return docs, tfs, nil
}

type runHeap []*runReader

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	if h[i].term != h[j].term {
		return h[i].term < h[j].term
	}
	return h[i].i < h[j].i
}
func (h runHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(*runReader)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeRuns merges the runs into dict.bin, terms.bin and post.bin: per
// term, in term order, its postings in blocks of blockSize with the
// block table (last passage, end of the block's bytes, best saturated
// frequency rounded up to float32) before them. A posting is three
// uvarints: the passage's distance from the one before, the term's count
// there and the passage's length (inline, so that scoring a posting reads
// no other page: 21 million lengths are 84 MB, out of every cache).
func (b *builder) mergeRuns(ctx context.Context, lens []uint32, avgdl float64) (terms int, postings, postBytes int64, err error) {
	var total int64
	h := runHeap{}
	var all []*runReader // every run's, for the bytes merged so far
	defer func() {
		for _, rr := range h {
			rr.f.Close()
		}
	}()
	for i := range b.st.Runs {
		f, err := os.Open(filepath.Join(b.dir, runName("run", i)))
		if err != nil {
			return 0, 0, 0, fmt.Errorf("bm25 build: %w", err)
		}
		if st, err := f.Stat(); err == nil {
			total += st.Size()
		}
		in := &countReader{r: f}
		rr := &runReader{i: i, f: f, in: in, r: bufio.NewReaderSize(in, 1<<18)}
		all = append(all, rr)
		ok, err := rr.nextTerm()
		if err != nil {
			f.Close()
			return 0, 0, 0, fmt.Errorf("bm25 build: run %d: %w", i, err)
		}
		if ok {
			h = append(h, rr)
		} else {
			f.Close()
		}
	}
	heap.Init(&h)
	var dict, termsW, post *bufio.Writer
	files := map[string]*os.File{}
	for _, name := range []string{dictFile, termsFile, postFile} {
		f, err := os.OpenFile(filepath.Join(b.dir, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("bm25 build: %w", err)
		}
		defer f.Close()
		files[name] = f
	}
	dict, termsW, post = bufio.NewWriterSize(files[dictFile], 1<<20), bufio.NewWriterSize(files[termsFile], 1<<20), bufio.NewWriterSize(files[postFile], 1<<22)
	var termOff, postOff int64
	var docs, tfs []uint32
	var hdr, data []byte
	var same []*runReader
	progressed := time.Now()
	for h.Len() > 0 {
		if terms%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, 0, 0, err
			}
			if b.progress != nil && time.Since(progressed) > 200*time.Millisecond {
				progressed = time.Now()
				b.progress(Progress{Stage: "merge", Done: bytesRead(all), Total: total, Passages: b.st.Docs})
			}
		}
		same = same[:0]
		t := h[0].term
		for h.Len() > 0 && h[0].term == t {
			same = append(same, heap.Pop(&h).(*runReader))
		}
		docs, tfs = docs[:0], tfs[:0]
		for _, rr := range same { // in run order: passages ascending
			if docs, tfs, err = rr.appendList(docs, tfs); err != nil {
				return 0, 0, 0, fmt.Errorf("bm25 build: run %d: %w", rr.i, err)
			}
			ok, err := rr.nextTerm()
			if err != nil {
				return 0, 0, 0, fmt.Errorf("bm25 build: run %d: %w", rr.i, err)
			}
			if ok {
				heap.Push(&h, rr)
			} else {
				rr.f.Close()
			}
		}
		var bestSat float32
		hdr, data, bestSat = appendList(hdr[:0], data[:0], docs, tfs, func(d uint32) uint32 { return lens[d] },
			func(tf, dl uint32) float64 { return sat(tf, b.p.norm(dl, avgdl)) })
		var rec [dictRecord]byte
		binary.LittleEndian.PutUint64(rec[0:], uint64(termOff))
		binary.LittleEndian.PutUint64(rec[8:], uint64(postOff))
		binary.LittleEndian.PutUint32(rec[16:], uint32(len(t)))
		binary.LittleEndian.PutUint32(rec[20:], uint32(len(docs)))
		binary.LittleEndian.PutUint32(rec[24:], math.Float32bits(bestSat))
		dict.Write(rec[:])
		termsW.WriteString(t)
		post.Write(hdr)
		post.Write(data)
		termOff += int64(len(t))
		postOff += int64(len(hdr) + len(data))
		postings += int64(len(docs))
		terms++
	}
	for name, w := range map[string]*bufio.Writer{dictFile: dict, termsFile: termsW, postFile: post} {
		if err := w.Flush(); err != nil {
			return 0, 0, 0, fmt.Errorf("bm25 build: %w", err)
		}
		if err := files[name].Sync(); err != nil {
			return 0, 0, 0, fmt.Errorf("bm25 build: %w", err)
		}
	}
	return terms, postings, postOff, nil
}

// bytesRead is the run bytes merged so far (read ahead into the
// readers' buffers included), for progress.
func bytesRead(runs []*runReader) int64 {
	var n int64
	for _, rr := range runs {
		n += rr.in.n
	}
	return n
}

// appendList appends a term's postings (passages docs, ascending, with
// counts tfs) to hdr and data in blocks of blockSize: to hdr, per block,
// its last passage, the end of its bytes in data and its best saturated
// frequency (rounded up to a float32); to data, per block, a byte giving
// the widths (1 to 4 bytes) of its three fields, then each field of its
// postings as little-endian integers of that width: the gaps from the
// previous passage, the counts, the passages' lengths (lenOf). Fixed
// widths decode without a branch per posting. bestSat is the best
// block's.
func appendList(hdr, data []byte, docs, tfs []uint32, lenOf func(doc uint32) uint32, satOf func(tf, dl uint32) float64) (_, _ []byte, bestSat float32) {
	nb := (len(docs) + blockSize - 1) / blockSize
	prev := uint32(0)
	var gaps, dls [blockSize]uint32
	for k := range nb {
		lo, hi := k*blockSize, min(len(docs), (k+1)*blockSize)
		mx := 0.0
		var maxGap, maxTF, maxDL uint32
		for j := lo; j < hi; j++ {
			g, dl := docs[j]-prev, lenOf(docs[j])
			gaps[j-lo], dls[j-lo] = g, dl
			maxGap, maxTF, maxDL = max(maxGap, g), max(maxTF, tfs[j]), max(maxDL, dl)
			prev = docs[j]
			mx = max(mx, satOf(tfs[j], dl))
		}
		gw, tw, dw := byteWidth(maxGap), byteWidth(maxTF), byteWidth(maxDL)
		data = append(data, byte(gw-1|(tw-1)<<2|(dw-1)<<4))
		data = appendFixed(data, gaps[:hi-lo], gw)
		data = appendFixed(data, tfs[lo:hi], tw)
		data = appendFixed(data, dls[:hi-lo], dw)
		up := roundUp32(mx)
		bestSat = max(bestSat, up)
		hdr = binary.LittleEndian.AppendUint32(hdr, docs[hi-1])
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(data)))
		hdr = binary.LittleEndian.AppendUint32(hdr, math.Float32bits(up))
	}
	return hdr, data, bestSat
}

// byteWidth is how many bytes (1 to 4) hold x.
func byteWidth(x uint32) int {
	switch {
	case x < 1<<8:
		return 1
	case x < 1<<16:
		return 2
	case x < 1<<24:
		return 3
	}
	return 4
}

// appendFixed appends each of xs as a little-endian integer of w bytes.
func appendFixed(data []byte, xs []uint32, w int) []byte {
	for _, x := range xs {
		data = append(data, byte(x))
		if w > 1 {
			data = append(data, byte(x>>8))
		}
		if w > 2 {
			data = append(data, byte(x>>16))
		}
		if w > 3 {
			data = append(data, byte(x>>24))
		}
	}
	return data
}

// roundUp32 is the least float32 not below x: a block's bound stays a
// bound once stored.
func roundUp32(x float64) float32 {
	f := float32(x)
	if float64(f) < x {
		f = math.Nextafter32(f, float32(math.Inf(1)))
	}
	return f
}
