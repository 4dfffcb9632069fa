// Package bm25 is the embedded retriever: an exact BM25 index over a
// wiki-18 style JSONL corpus, searched in process or served over HTTP with
// the Search-R1 retrieval protocol (PROTOCOLS.md §4).
//
// Scores are Lucene's BM25 (as Pyserini computes it, without Lucene's
// lossy one-byte length encoding): for a query term of count q in the
// query, held by n of the corpus's N passages, in a passage of len terms
// where it occurs tf times,
//
//	q · idf · tf/(tf + k1·(1 − b + b·len/avglen)),  idf = ln(1 + (N − n + 0.5)/(n + 0.5))
//
// summed over the query's distinct terms in the order they first occur in
// it, avglen the mean passage length in terms; k1 and b are Params
// (PyseriniParams, 0.9 and 0.4, by default). Ties are broken by corpus
// order. The top k are exact: the same passages and the same scores, to
// the bit, as scoring every passage (the tests compare with an exhaustive
// scorer on thousands of random queries).
//
// The index is a static one for an immutable corpus, built once per
// corpus and parameters and cached on disk under cacheDir/<entry>/ (see
// build.go: a resumable two-pass build with bounded memory). Its files are
// memory-mapped: the term dictionary (sorted, searched by bisection), the
// postings (per term, blocks of 128 passages with a block table holding
// each block's last passage and best saturated frequency), the passage
// lengths, the passages' line offsets in the corpus, and their id hashes.
// Passage text is read from the corpus file by offset when a hit is
// returned, so that the Go heap holds neither the corpus nor the index.
// A search is MaxScore over the query's terms with block-max checks on
// the non-essential ones: a passage whose bound cannot reach the current
// k-th score is skipped without decoding the rest of its postings.
package bm25

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/clients/retriever"
)

const (
	// MaxQueryChars bounds a query: longer text is cut (at a character
	// boundary) before it is analysed.
	MaxQueryChars = 2000
	// MaxQueryTerms bounds a query: only its first MaxQueryTerms
	// whitespace-separated words are searched.
	MaxQueryTerms = 64
	// MaxTopK is the largest top-k Search accepts.
	MaxTopK = 1000
	// fingerprintBytes is how much of each end of the corpus the cache
	// key reads.
	fingerprintBytes = 1 << 20
	// normTable is how many passage lengths have their normalisation
	// computed at open.
	normTable = 4096
)

// Index is an open BM25 index and its corpus. It is safe for concurrent
// use.
type Index struct {
	m      marker
	p      Params
	dir    string
	avgdl  float64
	corpus *os.File

	dict, terms, post, offs, ids []byte
	unmaps                       []func() error

	norms []float64 // norm of each length below normTable
	// sats holds sat(tf, norm(dl)) for the usual counts and lengths.
	sats [satTF][satDL]float64

	closeOnce sync.Once
	closeErr  error
}

// Open opens the BM25 index (PyseriniParams) of the corpus at corpusPath
// from cacheDir, building it there first when none is cached; see
// OpenWith.
func Open(ctx context.Context, corpusPath, cacheDir string, progress func(Progress)) (*Index, error) {
	return OpenWith(ctx, corpusPath, cacheDir, PyseriniParams, progress)
}

// OpenWith opens the index of the corpus at corpusPath with parameters p
// from cacheDir, building it first when no complete one is cached, or
// resuming a build a kill interrupted. An entry is found by the corpus's
// size and its first and last MiB (read in milliseconds at any size; a
// corpus edited in the middle in place, same size, is not noticed: give
// it another name or delete the entry) and the parameters. progress, if
// not nil, is called during a build; it is not called when the cached
// index is used. Builders of one entry wait for each other (a file lock):
// the second uses the first's index. A corpus line that is not a JSON
// object with string "id" and "contents" (or repeats an id) is an error
// naming file:line.
func OpenWith(ctx context.Context, corpusPath, cacheDir string, p Params, progress func(Progress)) (*Index, error) {
	if !(p.K1 >= 0) || !(p.B >= 0 && p.B <= 1) {
		return nil, fmt.Errorf("bm25: k1 %g must be at least 0 and b %g in [0, 1]", p.K1, p.B)
	}
	fp, size, err := fingerprint(corpusPath)
	if err != nil {
		return nil, fmt.Errorf("read corpus: %w", err)
	}
	if size == 0 {
		return nil, fmt.Errorf("read corpus %s: no passages", corpusPath)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("bm25 cache: %w", err)
	}
	name := fmt.Sprintf("%s-k1_%g-b_%g", fp, p.K1, p.B)
	final := filepath.Join(cacheDir, name)
	if ix, err := openEntry(final, corpusPath, fp, size, p); err == nil {
		return ix, nil
	}
	unlock, err := lockFile(filepath.Join(cacheDir, buildPrefix+name+".lock"))
	if err != nil {
		return nil, fmt.Errorf("bm25 cache: %w", err)
	}
	defer unlock()
	// Another builder may have finished while this one waited.
	if ix, err := openEntry(final, corpusPath, fp, size, p); err == nil {
		return ix, nil
	}
	removeStaleBuilds(cacheDir, buildPrefix+name)
	b := &builder{corpus: corpusPath, size: size, fp: fp, p: p, dir: filepath.Join(cacheDir, buildPrefix+name), progress: progress}
	if err := b.build(ctx); err != nil {
		return nil, err
	}
	// final holds nothing good (an older format, a damaged entry):
	// replaced.
	if err := os.RemoveAll(final); err != nil {
		return nil, fmt.Errorf("bm25 build: %w", err)
	}
	if err := os.Rename(b.dir, final); err != nil {
		return nil, fmt.Errorf("bm25 build: %w", err)
	}
	syncDir(cacheDir)
	ix, err := openEntry(final, corpusPath, fp, size, p)
	if err != nil {
		return nil, fmt.Errorf("bm25 open: %w", err)
	}
	return ix, nil
}

// fingerprint is the cache key of the corpus at path: the sha256 of its
// size and its first and last fingerprintBytes, 16 hex digits.
func fingerprint(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if st.IsDir() {
		return "", 0, fmt.Errorf("%s is a directory", path)
	}
	h := sha256.New()
	var sz [8]byte
	binary.LittleEndian.PutUint64(sz[:], uint64(st.Size()))
	h.Write(sz[:])
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, min(st.Size(), fingerprintBytes))); err != nil {
		return "", 0, err
	}
	if st.Size() > fingerprintBytes {
		tail := max(fingerprintBytes, st.Size()-fingerprintBytes)
		if _, err := io.Copy(h, io.NewSectionReader(f, tail, st.Size()-tail)); err != nil {
			return "", 0, err
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil))[:16], st.Size(), nil
}

// openEntry maps the index in dir if its marker says it is a complete
// index of this corpus with these parameters in the current format, and
// its files have the sizes the marker implies.
func openEntry(dir, corpusPath, fp string, size int64, p Params) (*Index, error) {
	raw, err := os.ReadFile(filepath.Join(dir, markerFile))
	if err != nil {
		return nil, err
	}
	var m marker
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("bad marker: %w", err)
	}
	if m.Version != formatVersion || m.Fingerprint != fp || m.Size != size || m.K1 != p.K1 || m.B != p.B || m.Docs <= 0 {
		return nil, errors.New("marker does not match corpus")
	}
	ix := &Index{m: m, p: p, dir: dir, avgdl: float64(m.Tokens) / float64(m.Docs)}
	if m.Tokens == 0 {
		ix.avgdl = 1
	}
	ix.norms = make([]float64, normTable)
	for i := range ix.norms {
		ix.norms[i] = p.norm(uint32(i), ix.avgdl)
	}
	for tf := range satTF {
		for dl := range satDL {
			ix.sats[tf][dl] = sat(uint32(tf), ix.norms[dl])
		}
	}
	want := map[string]int64{dictFile: int64(m.Terms) * dictRecord, postFile: m.PostBytes, offsFile: 8 * int64(m.Docs+1), idsFile: idRecord * int64(m.Docs)}
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{dictFile, &ix.dict}, {termsFile, &ix.terms}, {postFile, &ix.post}, {offsFile, &ix.offs}, {idsFile, &ix.ids}} {
		b, unmap, err := mapFile(filepath.Join(dir, f.name))
		if err != nil {
			ix.Close()
			return nil, err
		}
		ix.unmaps = append(ix.unmaps, unmap)
		if n, ok := want[f.name]; ok && int64(len(b)) != n {
			ix.Close()
			return nil, fmt.Errorf("%s holds %d bytes, want %d", f.name, len(b), n)
		}
		*f.dst = b
	}
	if ix.corpus, err = os.Open(corpusPath); err != nil {
		ix.Close()
		return nil, err
	}
	return ix, nil
}

// removeStaleBuilds removes build directories in cacheDir other than keep
// that nothing has written to for staleBuild: abandoned builds of other
// corpora. Best effort.
func removeStaleBuilds(cacheDir, keep string) {
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), buildPrefix) || e.Name() == keep {
			continue
		}
		dir := filepath.Join(cacheDir, e.Name())
		var newest time.Time
		filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if info, err := d.Info(); err == nil && info.ModTime().After(newest) {
				newest = info.ModTime()
			}
			return nil
		})
		if time.Since(newest) > staleBuild {
			os.RemoveAll(dir)
		}
	}
}

// syncDir makes renames and creations in dir durable; best effort.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		f.Close()
	}
}

// Close unmaps the index and closes the corpus. Calls after the first
// return its result.
func (ix *Index) Close() error {
	ix.closeOnce.Do(func() {
		var errs []error
		for _, u := range ix.unmaps {
			errs = append(errs, u())
		}
		if ix.corpus != nil {
			errs = append(errs, ix.corpus.Close())
		}
		if err := errors.Join(errs...); err != nil {
			ix.closeErr = fmt.Errorf("bm25 close: %w", err)
		}
	})
	return ix.closeErr
}

// Len returns the number of passages.
func (ix *Index) Len() int { return ix.m.Docs }

// Stats says what the index holds and how it was built.
type Stats struct {
	// Passages, Terms (distinct) and Postings in the index; Tokens is the
	// corpus's length in analysed terms.
	Passages, Terms  int
	Postings, Tokens int64
	// Params are the BM25 parameters it was built with.
	Params Params
	// IndexBytes is the size of its files; BuildSeconds how long the
	// build took (across resumes).
	IndexBytes   int64
	BuildSeconds float64
	// SHA256 is the corpus's.
	SHA256 string
}

// Stats returns what the index holds.
func (ix *Index) Stats() Stats {
	n := int64(len(ix.dict) + len(ix.terms) + len(ix.post) + len(ix.offs) + len(ix.ids))
	return Stats{Passages: ix.m.Docs, Terms: ix.m.Terms, Postings: ix.m.Postings, Tokens: ix.m.Tokens, Params: ix.p,
		IndexBytes: n, BuildSeconds: ix.m.BuildSeconds, SHA256: ix.m.SHA256}
}

// Passage returns the contents of the passage with the given id.
func (ix *Index) Passage(id string) (string, bool) {
	h := idHash(id)
	n := ix.m.Docs
	lo, hi := 0, n
	for lo < hi {
		mid := (lo + hi) / 2
		if idAt(ix.ids[idRecord*mid:]).h < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	for i := lo; i < n && idAt(ix.ids[idRecord*i:]).h == h; i++ {
		p, err := readPassage(ix.corpus, ix.offs, idAt(ix.ids[idRecord*i:]).ord)
		if err == nil && p.id == id {
			return p.contents, true
		}
	}
	return "", false
}

// Search returns, for each query in order, its topk best passages by BM25
// score, best first; equal scores are ordered by corpus order. A query is
// plain text, never query syntax: it is analysed like the passages and its
// terms are OR-ed. A query with no searchable terms (empty, or only stop
// words) gets no hits. Queries are bounded by MaxQueryChars and
// MaxQueryTerms. The queries are searched concurrently.
func (ix *Index) Search(ctx context.Context, queries []string, topk int) ([][]retriever.Hit, error) {
	if topk < 1 || topk > MaxTopK {
		return nil, fmt.Errorf("bm25 search: topk %d not in [1, %d]", topk, MaxTopK)
	}
	return SearchEach(ctx, queries, func(q string) ([]retriever.Hit, error) { return ix.searchOne(q, topk) })
}

// SearchEach answers each query with one, on GOMAXPROCS workers, the
// answers in the queries' order; the first failure (by query order) fails
// the whole, naming its query (the previous engine's Search shares it).
func SearchEach(ctx context.Context, queries []string, one func(query string) ([]retriever.Hit, error)) ([][]retriever.Hit, error) {
	out := make([][]retriever.Hit, len(queries))
	errs := make([]error, len(queries))
	workers := min(len(queries), runtime.GOMAXPROCS(0))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := ctx.Err(); err != nil {
					errs[i] = err
					continue
				}
				out[i], errs[i] = one(queries[i])
			}
		}()
	}
	for i := range queries {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("bm25 search: query %d: %w", i, err)
		}
	}
	return out, nil
}

// searchOne answers one query. An index damaged on disk since it was
// opened (the files' sizes are checked then, not their bytes) is an
// error naming it, not a crash.
func (ix *Index) searchOne(text string, topk int) (hits []retriever.Hit, err error) {
	defer func() {
		if r := recover(); r != nil {
			hits, err = nil, fmt.Errorf("the index in %s is damaged (%v): delete that directory to rebuild it", ix.dir, r)
		}
	}()
	return ix.hits(ix.search(text, topk, false))
}

// hits reads the ranked passages' ids and text from the corpus.
func (ix *Index) hits(ranked []scored) ([]retriever.Hit, error) {
	out := make([]retriever.Hit, 0, len(ranked))
	for _, r := range ranked {
		p, err := readPassage(ix.corpus, ix.offs, r.doc)
		if err != nil {
			return nil, err
		}
		out = append(out, retriever.Hit{ID: p.id, Contents: p.contents, Score: r.score})
	}
	return out, nil
}

// lookup finds term in the dictionary: its record, or false.
func (ix *Index) lookup(term string) ([]byte, bool) {
	lo, hi := 0, ix.m.Terms
	t := []byte(term)
	for lo < hi {
		mid := (lo + hi) / 2
		rec := ix.dict[dictRecord*mid : dictRecord*(mid+1)]
		off := binary.LittleEndian.Uint64(rec)
		l := binary.LittleEndian.Uint32(rec[16:])
		switch c := bytes.Compare(ix.terms[off:off+uint64(l)], t); {
		case c == 0:
			return rec, true
		case c < 0:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return nil, false
}

// norm is the length normalisation of a passage of dl terms (from the
// table for the usual lengths: the same bits as computing it).
func (ix *Index) norm(dl uint32) float64 {
	if int(dl) < len(ix.norms) {
		return ix.norms[dl]
	}
	return ix.p.norm(dl, ix.avgdl)
}

// satTF and satDL bound the counts and lengths whose saturated frequency
// is tabled: nearly every posting's (a division saved per posting).
const satTF, satDL = 4, 256

// tfSat is sat(tf, norm(dl)), from the table for the usual counts and
// lengths (the same bits as computing it).
func (ix *Index) tfSat(tf, dl uint32) float64 {
	if tf < satTF && dl < satDL {
		return ix.sats[tf][dl]
	}
	return sat(tf, ix.norm(dl))
}

var endDoc = uint32(math.MaxUint32)
