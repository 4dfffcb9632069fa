// Package bleveindex is the embedded retriever's previous engine, kept for
// `orchestrate bench --only retrieval --engines static,bleve`, which
// measures it side by side with the static index of package bm25 (speed,
// memory, recall@3): a BM25 index (Bleve, scorch) over a wiki-18 style
// JSONL corpus. Nothing else uses it.
//
// The index is built once per corpus content and cached on disk under
// cacheDir/<first 16 hex digits of the corpus sha256>/. A build happens in a
// temporary directory inside cacheDir and is renamed into place only once
// complete, with its marker file (complete.json) written last inside it, so
// a killed build is never trusted and concurrent builders cannot corrupt one
// another: the first rename wins and the others use its result.
//
// Scores are Bleve's BM25 (k1 = 1.2, b = 0.75): for one query term,
//
//	idf · tf·k1 / (tf + k1·(1 − b + b·len/avglen)),  idf = ln(1 + (N − n + 0.5)/(n + 0.5))
//
// with N the number of passages, n the number containing the term, len the
// passage's length in analysed tokens and avglen the mean of len over the
// corpus (rounded up to an integer). It differs from textbook
// (Lucene/Pyserini) BM25 in that tf is the square root of the term's count,
// and a multi-term query multiplies each term's score by its idf over the
// root of the sum of the query terms' squared idfs (query norm), and the sum
// by the fraction of query terms matched (coord).
//
// Bleve on its own would take avglen to be the number of distinct terms per
// passage (its "field cardinality" is the term dictionary's size), which
// over-penalises long passages; this package counts the corpus's tokens at
// build time and hands Bleve the true figure with each search.
//
// Options set what the library offers that the benchmark compares
// (docs/bench.md): shards searched in parallel, the indexing batch size,
// whether the segments are merged into one, and the query's form.
package bleveindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/index/scorch/mergeplan"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"
	"github.com/sourcegraph/conc/pool"

	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
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

	// formatVersion changes whenever the index layout or mapping does, so
	// that an index cached by an older version is rebuilt.
	formatVersion = 1
	// DefaultBatchSize is the number of passages per indexing batch
	// unless Options say otherwise.
	DefaultBatchSize = 1000
	// field is the one indexed field: the whole passage contents.
	field = "contents"
	// markerFile marks a complete cached index.
	markerFile = "complete.json"
	// indexSubdir holds the Bleve index inside a cache entry.
	indexSubdir = "index"
	// buildPrefix starts the names of build directories inside cacheDir.
	buildPrefix = ".build-"
)

// Options are the Bleve settings the benchmark compares; the zero value
// is the engine as it was kept (one index, batches of 1,000, merged into
// one segment, match queries).
type Options struct {
	// Shards splits the corpus into this many indexes (passage i goes to
	// shard i mod Shards), searched in parallel through a Bleve index
	// alias and built in parallel; 0 or 1 is one index. The alias shares
	// the passage count and total length with every shard but each shard
	// scores with its own document frequencies, so scores differ slightly
	// from one index's.
	Shards int
	// BatchSize is the passages per indexing batch (0: DefaultBatchSize).
	BatchSize int
	// NoMerge leaves the segments as indexing left them instead of
	// merging each index into one.
	NoMerge bool
	// Terms sends a query as a disjunction of its distinct analysed terms,
	// each boosted by its count, instead of a match query (one clause per
	// token, repeats included). Bleve's query norm and coord then see
	// fewer clauses, so scores differ slightly.
	Terms bool
}

// shards returns the number of indexes.
func (o Options) shards() int { return max(o.Shards, 1) }

// batchSize returns the passages per indexing batch.
func (o Options) batchSize() int {
	if o.BatchSize > 0 {
		return o.BatchSize
	}
	return DefaultBatchSize
}

// entrySuffix names the settings that change the index on disk, so that
// each has its own cache entry ("" for the default).
func (o Options) entrySuffix() string {
	s := ""
	if o.shards() > 1 {
		s += fmt.Sprintf("-shards%d", o.shards())
	}
	if o.batchSize() != DefaultBatchSize {
		s += fmt.Sprintf("-batch%d", o.batchSize())
	}
	if o.NoMerge {
		s += "-unmerged"
	}
	return s
}

// Index is an open BM25 index and its corpus. It is safe for concurrent
// use.
type Index struct {
	bi     bleve.Index   // the index, or the alias over the shards
	shards []bleve.Index // closed by Close
	opts   Options
	c      *corpus
	stats  *search.BM25Stats
	an     analysis.Analyzer

	closeOnce sync.Once
	closeErr  error
}

// marker is the content of complete.json.
type marker struct {
	Version int    `json:"version"`
	SHA256  string `json:"sha256"`
	Docs    int    `json:"docs"`
	Tokens  int64  `json:"tokens"`
	// Shards, BatchSize and Unmerged are the Options it was built with
	// (0, 0 and false in markers written before they were recorded: one
	// index, the default batch, merged).
	Shards       int     `json:"shards,omitempty"`
	BatchSize    int     `json:"batch_size,omitempty"`
	Unmerged     bool    `json:"unmerged,omitempty"`
	BuiltAt      string  `json:"built_at"`
	BuildSeconds float64 `json:"build_seconds"`
}

// Open is OpenOptions with the zero Options.
func Open(ctx context.Context, corpusPath, cacheDir string, progress func(done, total int)) (*Index, error) {
	return OpenOptions(ctx, corpusPath, cacheDir, Options{}, progress)
}

// OpenOptions reads the corpus at corpusPath and opens its BM25 index
// built with opts from cacheDir, building it there first when no complete
// index of this corpus content and these options is cached. progress, if
// not nil, is called during a build with the number of passages indexed so
// far and the total; it is not called when the cached index is used. A
// corpus line that is not a JSON object with string "id" and "contents"
// (or repeats an id) is an error naming file:line.
func OpenOptions(ctx context.Context, corpusPath, cacheDir string, opts Options, progress func(done, total int)) (*Index, error) {
	if opts.Shards < 0 || opts.BatchSize < 0 {
		return nil, fmt.Errorf("bm25 options: shards %d, batch size %d: want 0 or more", opts.Shards, opts.BatchSize)
	}
	c, err := readCorpus(corpusPath)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("bm25 cache: %w", err)
	}
	final := filepath.Join(cacheDir, c.sha256[:16]+opts.entrySuffix())
	if ix, err := openComplete(final, c, opts); err == nil {
		return ix, nil
	}
	if err := build(ctx, c, cacheDir, final, opts, progress); err != nil {
		return nil, err
	}
	ix, err := openComplete(final, c, opts)
	if err != nil {
		return nil, fmt.Errorf("bm25 open: %w", err)
	}
	return ix, nil
}

// openComplete opens the index in dir if its marker says it is a complete
// index of corpus c in the current format, built with opts.
func openComplete(dir string, c *corpus, opts Options) (*Index, error) {
	b, err := os.ReadFile(filepath.Join(dir, markerFile))
	if err != nil {
		return nil, err
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("bad marker: %w", err)
	}
	if m.Version != formatVersion || m.SHA256 != c.sha256 || m.Docs != len(c.ids) || m.Tokens <= 0 {
		return nil, errors.New("marker does not match corpus")
	}
	batch := m.BatchSize
	if batch == 0 {
		batch = DefaultBatchSize
	}
	if max(m.Shards, 1) != opts.shards() || batch != opts.batchSize() || m.Unmerged != opts.NoMerge {
		return nil, errors.New("marker does not match options")
	}
	ix := &Index{opts: opts, c: c, an: newMapping().AnalyzerNamed(en.AnalyzerName)}
	for s := range opts.shards() {
		// Read-only: no background merging, and several processes can
		// share the index.
		bi, err := bleve.OpenUsing(shardPath(dir, s, opts), map[string]any{"read_only": true})
		if err != nil {
			ix.Close()
			return nil, err
		}
		ix.shards = append(ix.shards, bi)
	}
	ix.bi = ix.shards[0]
	if len(ix.shards) > 1 {
		ix.bi = bleve.NewIndexAlias(ix.shards...)
	}
	if n, err := ix.bi.DocCount(); err != nil || n != uint64(len(c.ids)) {
		ix.Close()
		return nil, fmt.Errorf("index holds %d docs, want %d (%v)", n, len(c.ids), err)
	}
	ix.stats = &search.BM25Stats{
		DocCount:         float64(len(c.ids)),
		FieldCardinality: map[string]int{field: int(m.Tokens)},
	}
	return ix, nil
}

// shardPath is where shard s of an entry's index lives: the entry's index
// directory when there is one shard (as before shards existed).
func shardPath(entry string, s int, opts Options) string {
	if opts.shards() == 1 {
		return filepath.Join(entry, indexSubdir)
	}
	return filepath.Join(entry, indexSubdir, fmt.Sprintf("shard-%d", s))
}

// Segments returns the number of file segments the index's shards hold
// together (what a merge into one segment reduces to one per shard).
func (ix *Index) Segments() int {
	n := 0
	for _, bi := range ix.shards {
		n += fileSegments(bi)
	}
	return n
}

// newMapping returns the index mapping: BM25 scoring, one indexed (not
// stored) field analysed with the standard English analyzer, nothing
// dynamic.
func newMapping() *mapping.IndexMappingImpl {
	fm := bleve.NewTextFieldMapping()
	fm.Analyzer = en.AnalyzerName
	fm.Store = false
	fm.IncludeTermVectors = false
	fm.IncludeInAll = false
	fm.DocValues = false

	dm := bleve.NewDocumentStaticMapping()
	dm.AddFieldMappingsAt(field, fm)

	im := bleve.NewIndexMapping()
	im.ScoringModel = index.BM25Scoring
	im.DefaultAnalyzer = en.AnalyzerName
	im.DefaultMapping = dm
	im.IndexDynamic = false
	im.StoreDynamic = false
	im.DocValuesDynamic = false
	return im
}

// build indexes corpus c in a fresh directory inside cacheDir and renames
// it to final. If another builder got there first, its index is kept.
func build(ctx context.Context, c *corpus, cacheDir, final string, opts Options, progress func(done, total int)) (err error) {
	start := time.Now()
	tmp, err := os.MkdirTemp(cacheDir, buildPrefix+filepath.Base(final)+"-")
	if err != nil {
		return fmt.Errorf("bm25 build: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	tokens, err := buildIndex(ctx, c, tmp, opts, progress)
	if err != nil {
		return err
	}
	m, err := json.Marshal(marker{
		Version:      formatVersion,
		SHA256:       c.sha256,
		Docs:         len(c.ids),
		Tokens:       tokens,
		Shards:       opts.shards(),
		BatchSize:    opts.batchSize(),
		Unmerged:     opts.NoMerge,
		BuiltAt:      time.Now().UTC().Format(time.RFC3339),
		BuildSeconds: time.Since(start).Seconds(),
	})
	if err != nil {
		return fmt.Errorf("bm25 build: %w", err)
	}
	if err := writeFileSync(filepath.Join(tmp, markerFile), m); err != nil {
		return fmt.Errorf("bm25 build: %w", err)
	}
	// The rename fails when final exists: another builder finished first
	// (use theirs), or final holds something that is not a good index of
	// this corpus (an older format, a damaged entry: replace it).
	for attempt := 0; ; attempt++ {
		rerr := os.Rename(tmp, final)
		if rerr == nil {
			break
		}
		if ix, oerr := openComplete(final, c, opts); oerr == nil {
			ix.Close()
			os.RemoveAll(tmp)
			return nil
		}
		if attempt == 2 {
			return fmt.Errorf("bm25 build: %w", rerr)
		}
		if err := os.RemoveAll(final); err != nil {
			return fmt.Errorf("bm25 build: %w", err)
		}
	}
	return nil
}

// buildIndex writes the Bleve index of c in entry (its shards built in
// parallel, each in batches), then merges each shard into one segment
// unless opts say not to. It returns the corpus's length in analysed
// tokens.
func buildIndex(ctx context.Context, c *corpus, entry string, opts Options, progress func(done, total int)) (tokens int64, err error) {
	im := newMapping()
	// Count tokens alongside the indexing, which spends much of its time
	// waiting for batches to be persisted.
	counted := make(chan int64, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { counted <- countTokens(cctx, im.AnalyzerNamed(en.AnalyzerName), c.contents) }()
	defer func() {
		if err != nil {
			cancel() // the count is not needed
		}
		n := <-counted
		switch {
		case err != nil:
		case ctx.Err() != nil: // the count may have stopped early
			tokens, err = 0, ctx.Err()
		default:
			tokens = n
		}
	}()
	total := len(c.ids)
	var done atomic.Int64
	var progressMu sync.Mutex
	p := pool.New().WithErrors().WithContext(ctx).WithCancelOnError().WithFirstError()
	for s := range opts.shards() {
		p.Go(func(ctx context.Context) error {
			return buildShard(ctx, c, shardPath(entry, s, opts), s, opts, im, func(n int) {
				d := done.Add(int64(n))
				if progress != nil {
					progressMu.Lock()
					progress(int(d), total)
					progressMu.Unlock()
				}
			})
		})
	}
	if err := p.Wait(); err != nil {
		return 0, err
	}
	return 0, ctx.Err()
}

// buildShard writes shard s of c (passages s, s+Shards, ...) at path in
// batches, reporting each batch's size to indexed, and merges it into one
// segment unless opts say not to.
func buildShard(ctx context.Context, c *corpus, path string, s int, opts Options, im *mapping.IndexMappingImpl, indexed func(int)) (err error) {
	bi, err := bleve.NewUsing(path, im, scorch.Name, scorch.Name, nil)
	if err != nil {
		return fmt.Errorf("bm25 build: %w", err)
	}
	defer func() {
		if cerr := bi.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("bm25 build: %w", cerr)
		}
	}()
	step, size := opts.shards(), opts.batchSize()
	want := 0
	b := bi.NewBatch()
	for i := s; i < len(c.ids); i += step {
		if err := b.Index(strconv.Itoa(i), map[string]any{field: c.contents[i]}); err != nil {
			return fmt.Errorf("bm25 build: passage %q: %w", c.ids[i], err)
		}
		want++
		if b.Size() == size || i+step >= len(c.ids) {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := b.Size()
			if err := bi.Batch(b); err != nil {
				return fmt.Errorf("bm25 build: %w", err)
			}
			indexed(n)
			b = bi.NewBatch()
		}
	}
	if n, err := bi.DocCount(); err != nil || n != uint64(want) {
		return fmt.Errorf("bm25 build: shard %d indexed %d docs, want %d (%v)", s, n, want, err)
	}
	if opts.NoMerge {
		return nil
	}
	// One segment makes searches faster; a failed merge only costs speed.
	// A force merge merges the segments persisted when it starts, and
	// segments still being persisted or merged in the background are left
	// beside its result (one call left 2 or 3), so it is asked again until
	// one is left, as Bleve's own test of it does.
	// The merged root is then persisted before the index is closed (a
	// batch returns once the root holding it is on disk), or a reopened
	// index could find the root from before the last merge.
	if adv, err := bi.Advanced(); err == nil {
		if sc, ok := adv.(*scorch.Scorch); ok {
			for try := 0; try < maxForceMerges && fileSegments(bi) > 1 && ctx.Err() == nil; try++ {
				mo := mergeplan.SingleSegmentMergePlanOptions
				if err := sc.ForceMerge(ctx, &mo); err != nil {
					break
				}
			}
			if err := bi.SetInternal([]byte(mergedKey), []byte("1")); err != nil {
				return fmt.Errorf("bm25 build: %w", err)
			}
		}
	}
	return ctx.Err()
}

// mergedKey is the internal key written after the merges, whose batch
// waits until the merged root is persisted.
const mergedKey = "hindsearch-merged"

// maxForceMerges bounds the force merges of one shard.
const maxForceMerges = 20

// fileSegments returns the number of file segments at bi's root (0 when
// the statistic is missing).
func fileSegments(bi bleve.Index) int {
	st, _ := bi.StatsMap()["index"].(map[string]any)
	v, _ := st["num_root_filesegments"].(uint64)
	return int(v)
}

// countTokens returns the total number of tokens a produces from texts,
// that is the sum of the lengths Bleve records for the indexed passages.
// It stops early (with a meaningless count) when ctx is done.
func countTokens(ctx context.Context, a analysis.Analyzer, texts []string) int64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			for i := w; i < len(texts) && ctx.Err() == nil; i += workers {
				n += int64(len(a.Analyze([]byte(texts[i]))))
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	return total.Load()
}

// writeFileSync writes data to path and syncs it.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Close closes the index. Calls after the first return its result.
func (ix *Index) Close() error {
	ix.closeOnce.Do(func() {
		for _, bi := range ix.shards {
			if err := bi.Close(); err != nil && ix.closeErr == nil {
				ix.closeErr = fmt.Errorf("bm25 close: %w", err)
			}
		}
	})
	return ix.closeErr
}

// Len returns the number of passages.
func (ix *Index) Len() int { return len(ix.c.ids) }

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
	return bm25.SearchEach(ctx, queries, func(q string) ([]retriever.Hit, error) { return ix.search(ctx, q, topk) })
}

// search answers one query.
func (ix *Index) search(ctx context.Context, text string, topk int) ([]retriever.Hit, error) {
	text = bm25.BoundQuery(text)
	hits := []retriever.Hit{}
	if text == "" {
		return hits, nil
	}
	q := ix.query(text)
	if q == nil {
		return hits, nil
	}
	// Bleve breaks score ties by the order it meets documents in, which
	// depends on the index's segment layout. Fetch until every document
	// tied with the k-th is in hand, then order ties by corpus order.
	var got search.DocumentMatchCollection
	for size := topk; ; size *= 2 {
		req := bleve.NewSearchRequestOptions(q, size, 0, false)
		req.PreSearchData = map[string]any{search.BM25PreSearchDataKey: ix.stats}
		res, err := ix.bi.SearchInContext(ctx, req)
		if err != nil {
			return nil, err
		}
		got = res.Hits
		if len(got) < size || got[len(got)-1].Score < got[topk-1].Score {
			break
		}
	}
	type scored struct {
		ord   int
		score float64
	}
	ranked := make([]scored, len(got))
	for i, h := range got {
		ord, err := strconv.Atoi(h.ID)
		if err != nil || ord < 0 || ord >= len(ix.c.ids) {
			return nil, fmt.Errorf("index holds unknown doc %q", h.ID)
		}
		ranked[i] = scored{ord, h.Score}
	}
	slices.SortFunc(ranked, func(a, b scored) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		return a.ord - b.ord
	})
	for _, r := range ranked[:min(topk, len(ranked))] {
		hits = append(hits, retriever.Hit{ID: ix.c.ids[r.ord], Contents: ix.c.contents[r.ord], Score: r.score})
	}
	return hits, nil
}

// query is the Bleve query for text in the form opts ask for, or nil when
// text has no searchable term (Terms form only; a match query of such a
// text finds nothing by itself).
func (ix *Index) query(text string) query.Query {
	if !ix.opts.Terms {
		q := bleve.NewMatchQuery(text)
		q.SetField(field)
		q.Analyzer = en.AnalyzerName
		return q
	}
	count := map[string]int{}
	var order []string
	for _, tok := range ix.an.Analyze([]byte(text)) {
		t := string(tok.Term)
		if count[t] == 0 {
			order = append(order, t)
		}
		count[t]++
	}
	if len(order) == 0 {
		return nil
	}
	terms := make([]query.Query, len(order))
	for i, t := range order {
		tq := bleve.NewTermQuery(t)
		tq.SetField(field)
		tq.SetBoost(float64(count[t]))
		terms[i] = tq
	}
	return bleve.NewDisjunctionQuery(terms...)
}
