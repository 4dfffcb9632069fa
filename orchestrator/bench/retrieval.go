package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy/format"
	"github.com/hindsearch/hindsearch/clients/retriever"
	"github.com/hindsearch/hindsearch/clients/retriever/bm25"
	"github.com/hindsearch/hindsearch/clients/retriever/bm25/bleveindex"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
)

// RetrievalOptions configure the retrieval scale benchmark (orchestrate
// bench --only retrieval --passages N): a Wikipedia-like corpus of
// Passages passages is generated, indexed by the embedded BM25 retriever,
// served over HTTP on loopback and queried with real benchmark questions,
// as a rollout queries it.
type RetrievalOptions struct {
	// Passages is the generated corpus's size.
	Passages int
	// Corpus is the shipped corpus whose word frequencies the generated
	// passages follow; Questions are question files whose questions are
	// the queries.
	Corpus    string
	Questions []string
	// Dir holds the generated corpus and the index.
	Dir string
	// Seconds bounds each query phase (default 10).
	Seconds float64
	// Engine is the index measured: EngineStatic (the embedded
	// retriever's, the default), EngineBleve (its previous one) or a
	// variant of it (ParseBleveEngine).
	Engine string
	Out    io.Writer
}

// The engines the retrieval benchmark measures.
const (
	// EngineStatic is package bm25's static index (the embedded
	// retriever).
	EngineStatic = "static"
	// EngineBleve is the previous engine (bm25/bleveindex), kept to be
	// measured side by side.
	EngineBleve = "bleve"
)

// engine is an open index of either kind.
type engine interface {
	bm25.Searcher
	Len() int
	Close() error
}

// openEngine opens (building if need be) the corpus's index of kind name
// under dir.
func openEngine(ctx context.Context, name, corpus, dir string) (engine, error) {
	static, opts, err := engineOptions(name)
	if err != nil {
		return nil, err
	}
	if static {
		return bm25.Open(ctx, corpus, dir, nil)
	}
	return bleveindex.OpenOptions(ctx, corpus, dir, opts, nil)
}

// CheckEngine reports whether name is an engine the retrieval benchmark
// measures (EngineStatic, EngineBleve or a variant: ParseBleveEngine),
// so that a bad name fails before anything is generated or built.
func CheckEngine(name string) error {
	_, _, err := engineOptions(name)
	return err
}

// engineOptions reads an engine's name: the static index ("" too), or a
// Bleve variant with its options.
func engineOptions(name string) (static bool, _ bleveindex.Options, _ error) {
	if name == EngineStatic || name == "" {
		return true, bleveindex.Options{}, nil
	}
	opts, err := ParseBleveEngine(name)
	return false, opts, err
}

// ParseBleveEngine reads the name of a Bleve variant: "bleve" (the
// previous engine as kept) followed by any of "-shardsN" (N indexes
// searched in parallel), "-batchN" (N passages per indexing batch; a
// trailing k multiplies by 1,000), "-unmerged" (no merge into one
// segment) and "-terms" (a query as a disjunction of its distinct terms),
// e.g. "bleve-shards2-terms".
func ParseBleveEngine(name string) (bleveindex.Options, error) {
	var o bleveindex.Options
	parts := strings.Split(name, "-")
	if parts[0] != EngineBleve {
		return o, fmt.Errorf("--engines: unknown engine %q (want %s, %s or %s-<option>...: shardsN, batchN, unmerged, terms)", name, EngineStatic, EngineBleve, EngineBleve)
	}
	number := func(p, prefix string) (int, error) {
		v := strings.TrimPrefix(p, prefix)
		mult := 1
		if rest, ok := strings.CutSuffix(v, "k"); ok {
			v, mult = rest, 1000
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("--engines: %q: %q wants a whole number of 1 or more after %q", name, p, prefix)
		}
		return n * mult, nil
	}
	for _, p := range parts[1:] {
		var err error
		switch {
		case strings.HasPrefix(p, "shards"):
			o.Shards, err = number(p, "shards")
		case strings.HasPrefix(p, "batch"):
			o.BatchSize, err = number(p, "batch")
		case p == "unmerged":
			o.NoMerge = true
		case p == "terms":
			o.Terms = true
		default:
			err = fmt.Errorf("--engines: %q: unknown option %q (want shardsN, batchN, unmerged or terms)", name, p)
		}
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// RetrievalReport is what the scale benchmark measures.
type RetrievalReport struct {
	Engine   string `json:"engine"`
	Passages int    `json:"passages"`
	// BuildSeconds and BuildPerSecond time this run's build; when
	// IndexReused (the --dir already held an index or a build's state,
	// built or resumed here) they time only what was left, and are not
	// printed as the build's.
	BuildSeconds   float64 `json:"build_seconds"`
	BuildPerSecond float64 `json:"build_passages_per_second"`
	IndexReused    bool    `json:"index_reused,omitempty"`
	IndexBytes     int64   `json:"index_bytes"`
	// Segments is a Bleve index's file segments, all shards together
	// (0 for the static index, which has none).
	Segments        int     `json:"segments,omitempty"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	ServingRSSBytes int64   `json:"serving_rss_bytes"`
	StartSeconds    float64 `json:"start_seconds"`
	// Phases are the query phases: batches of 64 queries (one /retrieve
	// call each, 1 at a time), single queries at concurrency 8, and the
	// index alone in process on one goroutine (inproc-1thread: every
	// question at least once; its p50/p99 are a query's).
	Phases []RetrievalPhase `json:"phases"`
	// RecallAt3 is, on the shipped corpus and questions (not the
	// generated corpus), the share of questions whose top 3 passages hold
	// one of its gold answers (normalised as exact match normalises);
	// RecallQuestions is how many were asked.
	RecallAt3       float64 `json:"recall_at_3"`
	RecallQuestions int     `json:"recall_questions"`
	// Simulated is false: the index and server are the real embedded
	// retriever; only the corpus is generated.
	Simulated bool `json:"simulated"`
}

// RetrievalPhase is one query phase's figures.
type RetrievalPhase struct {
	Name           string  `json:"name"`
	Batch          int     `json:"batch"`
	Concurrency    int     `json:"concurrency"`
	Queries        int     `json:"queries"`
	QueriesPerSec  float64 `json:"queries_per_second"`
	CallP50Millis  float64 `json:"call_p50_ms"`
	CallP99Millis  float64 `json:"call_p99_ms"`
	QueriesPerCall int     `json:"queries_per_call"`
}

// Retrieval runs the scale benchmark.
func Retrieval(ctx context.Context, o RetrievalOptions) (*RetrievalReport, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Passages < 100 {
		return nil, fmt.Errorf("--passages %d: want at least 100", o.Passages)
	}
	if o.Seconds <= 0 {
		o.Seconds = 10
	}
	words, weights, err := wordTable(o.Corpus)
	if err != nil {
		return nil, err
	}
	var queries []string
	for _, f := range o.Questions {
		qs, err := dataset.Load(f)
		if err != nil {
			return nil, err
		}
		for _, q := range qs {
			queries = append(queries, q.Question)
		}
	}
	if len(queries) == 0 {
		return nil, fmt.Errorf("no questions to query with")
	}
	if o.Engine == "" {
		o.Engine = EngineStatic
	}
	corpus := filepath.Join(o.Dir, fmt.Sprintf("corpus-%d.jsonl", o.Passages))
	t0 := time.Now()
	if _, err := os.Stat(corpus); err == nil {
		fmt.Fprintf(o.Out, "retrieval: reusing %s\n", corpus)
	} else {
		if err := writeCorpus(corpus, o.Passages, words, weights); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Out, "retrieval: generated %d passages in %.1fs (%s)\n", o.Passages, time.Since(t0).Seconds(), corpus)
	}
	rep := &RetrievalReport{Engine: o.Engine, Passages: o.Passages}
	indexDir := filepath.Join(o.Dir, "index-"+o.Engine)
	rep.IndexReused = dirBytes(indexDir) > 0
	t0 = time.Now()
	ix, err := openEngine(ctx, o.Engine, corpus, indexDir)
	if err != nil {
		return nil, err
	}
	rep.BuildSeconds = time.Since(t0).Seconds()
	rep.BuildPerSecond = float64(o.Passages) / rep.BuildSeconds
	rep.IndexBytes = dirBytes(indexDir)
	_, rep.PeakRSSBytes = rss()
	ix.Close()
	// What the build took goes back to the system, so that the serving
	// RSS is the served index's.
	runtime.GC()
	debug.FreeOSMemory()
	// Start from the built index, as a server that restarts does.
	t0 = time.Now()
	ix, err = openEngine(ctx, o.Engine, corpus, indexDir)
	if err != nil {
		return nil, err
	}
	defer ix.Close()
	rep.StartSeconds = time.Since(t0).Seconds()
	if sg, ok := ix.(interface{ Segments() int }); ok {
		rep.Segments = sg.Segments()
	}
	built := fmt.Sprintf("built in %.1fs (%.0f passages/s)", rep.BuildSeconds, rep.BuildPerSecond)
	if rep.IndexReused {
		built = fmt.Sprintf("reused the index in %s (%.1fs: not a build's time)", indexDir, rep.BuildSeconds)
	}
	fmt.Fprintf(o.Out, "retrieval: %s: %s, %.1f MB on disk, started again in %.1fs\n",
		o.Engine, built, float64(rep.IndexBytes)/(1<<20), rep.StartSeconds)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: bm25.NewHandler(ix, bm25.StyleDense), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	to := transport.DefaultOptions("retriever", "http://"+l.Addr().String())
	to.PoolSize = 16
	rc, err := retriever.New(to)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	for _, ph := range []RetrievalPhase{{Name: "batch64", Batch: 64, Concurrency: 1}, {Name: "single-c8", Batch: 1, Concurrency: 8}} {
		got, err := queryPhase(ctx, rc, queries, ph, time.Duration(o.Seconds*float64(time.Second)))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Out, "retrieval: %s: %s: %.1f queries/s, a call p50 %.1f ms, p99 %.1f ms\n", o.Engine, got.Name, got.QueriesPerSec, got.CallP50Millis, got.CallP99Millis)
		rep.Phases = append(rep.Phases, got)
	}
	// The index alone, warm, one thread: a query's cost without HTTP,
	// JSON or the other phases' concurrency (what a core can do).
	got, err := searchPhase(ctx, ix, queries, time.Duration(o.Seconds*float64(time.Second)))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "retrieval: %s: %s: %.1f queries/s, a query p50 %.1f ms, p99 %.1f ms\n", o.Engine, got.Name, got.QueriesPerSec, got.CallP50Millis, got.CallP99Millis)
	rep.Phases = append(rep.Phases, got)
	rep.ServingRSSBytes, _ = rss()
	if err := recallAt3(ctx, o, rep); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "retrieval: recall@3 on the shipped corpus %.3f (%d questions)\n", rep.RecallAt3, rep.RecallQuestions)
	return rep, nil
}

// recallAt3 measures the index's quality on the shipped corpus: the share
// of the shipped questions whose top-3 passages contain a gold answer.
func recallAt3(ctx context.Context, o RetrievalOptions, rep *RetrievalReport) error {
	ix, err := openEngine(ctx, o.Engine, o.Corpus, filepath.Join(o.Dir, "index-shipped-"+o.Engine))
	if err != nil {
		return err
	}
	defer ix.Close()
	hit, n := 0, 0
	for _, f := range o.Questions {
		qs, err := dataset.Load(f)
		if err != nil {
			return err
		}
		texts := make([]string, len(qs))
		for i, q := range qs {
			texts[i] = q.Question
		}
		res, err := ix.Search(ctx, texts, 3)
		if err != nil {
			return err
		}
		for i, q := range qs {
			n++
			if passagesHold(res[i], q.Golds) {
				hit++
			}
		}
	}
	if n > 0 {
		rep.RecallAt3, rep.RecallQuestions = float64(hit)/float64(n), n
	}
	return nil
}

// passagesHold reports whether any hit's text holds one of golds, both
// normalised as exact match normalises them (format.Normalize), as whole
// words.
func passagesHold(hits []retriever.Hit, golds []string) bool {
	for _, h := range hits {
		text := " " + format.Normalize(h.Contents) + " "
		for _, g := range golds {
			if ng := format.Normalize(g); ng != "" && strings.Contains(text, " "+ng+" ") {
				return true
			}
		}
	}
	return false
}

// queryPhase sends /retrieve calls of ph.Batch queries, ph.Concurrency at
// a time, top-3, for d.
func queryPhase(ctx context.Context, rc *retriever.Client, queries []string, ph RetrievalPhase, d time.Duration) (RetrievalPhase, error) {
	var mu sync.Mutex
	var lat []float64
	var firstErr error
	next := 0
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < ph.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				mu.Lock()
				batch := make([]string, ph.Batch)
				for i := range batch {
					batch[i] = queries[next%len(queries)]
					next++
				}
				mu.Unlock()
				t := time.Now()
				_, err := rc.Retrieve(ctx, batch, 3)
				ms := float64(time.Since(t).Microseconds()) / 1000
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, ms)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return ph, firstErr
	}
	ph.QueriesPerCall = ph.Batch
	ph.record(lat, time.Since(start).Seconds())
	return ph, nil
}

// record sets a phase's figures from its calls' latencies (ms) over
// seconds of wall time.
func (ph *RetrievalPhase) record(lat []float64, seconds float64) {
	sort.Float64s(lat)
	ph.Queries = len(lat) * ph.Batch
	ph.QueriesPerSec = float64(ph.Queries) / seconds
	ph.CallP50Millis = lat[len(lat)/2]
	ph.CallP99Millis = lat[min(len(lat)-1, len(lat)*99/100)]
}

// searchPhase asks ix the queries one at a time, in process on one
// goroutine, for d (every query at least once), timing each.
func searchPhase(ctx context.Context, ix engine, queries []string, d time.Duration) (RetrievalPhase, error) {
	ph := RetrievalPhase{Name: "inproc-1thread", Batch: 1, Concurrency: 1, QueriesPerCall: 1}
	var lat []float64
	start := time.Now()
	deadline := start.Add(d)
	for i := 0; i < len(queries) || time.Now().Before(deadline); i++ {
		if err := ctx.Err(); err != nil {
			return ph, err
		}
		t := time.Now()
		if _, err := ix.Search(ctx, []string{queries[i%len(queries)]}, 3); err != nil {
			return ph, err
		}
		lat = append(lat, float64(time.Since(t).Microseconds())/1000)
	}
	ph.record(lat, time.Since(start).Seconds())
	return ph, nil
}

// wordTable is the word frequencies of a corpus's passages: generated
// passages draw their words from it, so term statistics are Wikipedia's
// (the shipped corpus is Wikipedia passages).
func wordTable(path string) ([]string, []float64, error) {
	texts, err := dataset.LoadCorpus(path)
	if err != nil {
		return nil, nil, err
	}
	count := map[string]int{}
	for _, t := range texts {
		for _, w := range strings.Fields(t) {
			count[w]++
		}
	}
	words := make([]string, 0, len(count))
	for w := range count {
		words = append(words, w)
	}
	slices.Sort(words)
	cum := make([]float64, len(words))
	total := 0.0
	for i, w := range words {
		total += float64(count[w])
		cum[i] = total
	}
	return words, cum, nil
}

// writeCorpus writes n passages of about 100 words drawn from the table,
// each with a two-word title, in wiki-18's JSONL shape.
func writeCorpus(path string, n int, words []string, cum []float64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path + ".partial")
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	total := cum[len(cum)-1]
	draw := func() string {
		x := rng.Float64() * total
		return words[sort.SearchFloat64s(cum, x)]
	}
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.Reset()
		sb.WriteString(`"` + draw() + " " + draw() + `"` + "\n")
		k := 80 + rng.IntN(41)
		for j := 0; j < k; j++ {
			if j > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(draw())
		}
		b, _ := json.Marshal(map[string]string{"id": strconv.Itoa(i), "contents": sb.String()})
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".partial", path)
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// rss returns this process's resident set size and its peak (VmRSS,
// VmHWM of /proc/self/status; 0 where there is no /proc).
func rss() (now, peak int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				now = v << 10
			case "VmHWM:":
				peak = v << 10
			}
		}
	}
	return now, peak
}
