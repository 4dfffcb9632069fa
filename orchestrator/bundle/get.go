package bundle

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/hindsearch/hindsearch/clients/hub"
	"github.com/hindsearch/hindsearch/orchestrator/dataset"
)

// Options configure Get and Verify.
type Options struct {
	// Hub fetches the files; Cache is the Hugging Face cache they go to.
	Hub   *hub.Client
	Cache string
	// Dir is the data directory: each bundle's files (links into the
	// cache) and outputs under Dir/<bundle>/.
	Dir string
	// DryRun asks only for the files' metadata and prints the plan and
	// the disk preflight.
	DryRun bool
	// Free returns the bytes free on the filesystem of a directory
	// (false: unknown).
	Free func(dir string) (int64, bool)
	// BuildBM25 builds the BM25 index of corpus under dir and returns
	// its document count (the bm25 step and check).
	BuildBM25 func(ctx context.Context, corpus, dir string) (int, error)
	// Out receives the plan, one line per file, and the checks.
	Out io.Writer
}

// Get gets the bundles: a disk preflight (the bytes still to fetch and
// to make against the space free, for the cache and the data directory),
// then every file (only its metadata when it is in the cache already),
// the bundle's links and made outputs, and its checks. A bundle whose
// files are unchanged (their etags) and whose outputs were made and
// checked before is not made again.
func Get(ctx context.Context, bundles []Named, o Options) error {
	type planned struct {
		b     Named
		metas []hub.Meta
	}
	var plan []planned
	var fetch, make int64
	for _, b := range bundles {
		p := planned{b: b}
		for _, f := range b.Files {
			m, err := o.Hub.Meta(ctx, f.file())
			if err != nil {
				return fmt.Errorf("bundle %s: %w", b.Name, err)
			}
			p.metas = append(p.metas, m)
		}
		if !o.done(b.Name, p.metas) {
			for i, f := range b.Files {
				if !inCache(o.Cache, f, p.metas[i]) {
					fetch += p.metas[i].Size
				}
			}
			for _, s := range b.Make {
				make += s.Size
			}
		}
		plan = append(plan, p)
	}
	fmt.Fprintf(o.Out, "to fetch: %s into %s; to make: %s under %s (peak %s)\n", human(fetch), o.Cache, human(make), o.Dir, human(fetch+make))
	if o.Free != nil {
		if free, ok := o.Free(o.Cache); ok && free < fetch+make {
			return fmt.Errorf("not enough disk: the bundles need %s at peak (%s to fetch into %s, %s to make under %s), %s is free: free space, or point HF_HUB_CACHE and --dir at a larger disk",
				human(fetch+make), human(fetch), o.Cache, human(make), o.Dir, human(free))
		}
	}
	for _, p := range plan {
		for i, f := range p.b.Files {
			fmt.Fprintf(o.Out, "  %s/%s  %s  %s\n", p.b.Name, f.name(), human(p.metas[i].Size), f.file())
		}
	}
	if o.DryRun {
		return nil
	}
	for _, p := range plan {
		if err := o.getOne(ctx, p.b, p.metas); err != nil {
			return fmt.Errorf("bundle %s: %w", p.b.Name, err)
		}
	}
	return nil
}

func inCache(cache string, f FileSpec, m hub.Meta) bool {
	st, err := os.Stat(filepath.Join(cache, hub.RepoFolder(f.Repo, f.Type), "blobs", m.Etag))
	return err == nil && st.Size() == m.Size
}

// doneFile records a bundle made and checked: the etags of its files.
const doneFile = ".bundle.json"

type doneRecord struct {
	Etags []string `json:"etags"`
}

// done reports whether the bundle was made and checked from files with
// these etags.
func (o Options) done(name string, metas []hub.Meta) bool {
	b, err := os.ReadFile(filepath.Join(o.Dir, safeName(name), doneFile))
	if err != nil {
		return false
	}
	var d doneRecord
	if json.Unmarshal(b, &d) != nil || len(d.Etags) != len(metas) {
		return false
	}
	for i, m := range metas {
		if d.Etags[i] != m.Etag {
			return false
		}
	}
	return true
}

// safeName is a bundle's directory name (tokenizer:ORG/NAME has a colon
// and a slash).
func safeName(name string) string {
	return strings.NewReplacer(":", "-", "/", "--").Replace(name)
}

func (o Options) getOne(ctx context.Context, b Named, metas []hub.Meta) error {
	dir := filepath.Join(o.Dir, safeName(b.Name))
	if o.done(b.Name, metas) {
		fmt.Fprintf(o.Out, "%s: up to date (%s)\n", b.Name, dir)
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	consumed := map[string]bool{}
	for _, s := range b.Make {
		if s.Kind != "bm25" {
			for _, f := range s.From {
				consumed[f] = true
			}
		}
	}
	paths := map[string]string{}
	// built holds the document counts of the BM25 indexes just built, so
	// that their checks do not open them (and read the corpus) again.
	built := map[string]int{}
	for i, f := range b.Files {
		// The preflight asked for the metadata: no second request.
		res, err := o.Hub.Fetch(ctx, f.file(), metas[i], o.Cache)
		if err != nil {
			return err
		}
		how := "in the cache"
		if res.Fetched {
			how = "fetched"
		}
		fmt.Fprintf(o.Out, "  %s/%s: %s (%s)\n", b.Name, f.name(), how, human(res.Meta.Size))
		paths[f.name()] = res.Path
		if !consumed[f.name()] {
			if err := relink(res.Path, filepath.Join(dir, f.name())); err != nil {
				return err
			}
		}
	}
	for _, s := range b.Make {
		if err := o.make(ctx, s, dir, paths, built); err != nil {
			return fmt.Errorf("%s %s: %w", s.Kind, s.To, err)
		}
	}
	if err := o.check(ctx, b, dir, built); err != nil {
		return err
	}
	var d doneRecord
	for _, m := range metas {
		d.Etags = append(d.Etags, m.Etag)
	}
	rec, _ := json.Marshal(d)
	return os.WriteFile(filepath.Join(dir, doneFile), rec, 0o644)
}

// relink makes link a symlink to target (absolute: into the cache).
func relink(target, link string) error {
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	_ = os.Remove(link)
	return os.Symlink(abs, link)
}

// make runs one step, writing its output by way of a temporary file (a
// killed step leaves no half output under its name); a BM25 index's
// document count goes into built.
func (o Options) make(ctx context.Context, s Step, dir string, paths map[string]string, built map[string]int) error {
	out := filepath.Join(dir, s.To)
	switch s.Kind {
	case "bm25":
		if len(s.From) != 1 {
			return errors.New("want one corpus")
		}
		corpus := filepath.Join(o.Dir, s.From[0])
		if o.BuildBM25 == nil {
			return errors.New("no BM25 builder")
		}
		n, err := o.BuildBM25(ctx, corpus, out)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "  %s: BM25 index of %d passages\n", out, n)
		built[s.To] = n
		return nil
	}
	tmp := out + ".partial"
	w, err := os.Create(tmp)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	for _, from := range s.From {
		src, ok := paths[from]
		if !ok {
			w.Close()
			return fmt.Errorf("%s is not a file of the bundle", from)
		}
		if err := copyFrom(ctx, bw, src, s.Kind == "gunzip"); err != nil {
			w.Close()
			_ = os.Remove(tmp)
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "  %s: made (%s)\n", out, human(sizeOf(tmp)))
	return os.Rename(tmp, out)
}

func copyFrom(ctx context.Context, w io.Writer, src string, gunzip bool) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = bufio.NewReaderSize(f, 1<<20)
	if gunzip {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		defer gz.Close()
		r = gz
	}
	_, err = io.Copy(w, ctxReader{ctx, r})
	return err
}

// ctxReader stops a long copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

func sizeOf(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// Verify runs the bundles' checks on what is on disk, without a request.
func Verify(ctx context.Context, bundles []Named, o Options) error {
	var failed []string
	for _, b := range bundles {
		dir := filepath.Join(o.Dir, safeName(b.Name))
		for _, f := range b.Files {
			consumedByStep := false
			for _, s := range b.Make {
				if s.Kind != "bm25" && slices.Contains(s.From, f.name()) {
					consumedByStep = true
				}
			}
			if !consumedByStep && !exists(filepath.Join(dir, f.name())) {
				failed = append(failed, fmt.Sprintf("%s/%s: missing: run orchestrate data get %s", b.Name, f.name(), b.Name))
			}
		}
		if err := o.check(ctx, b, dir, nil); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", b.Name, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d problems:\n\t%s", len(failed), strings.Join(failed, "\n\t"))
	}
	return nil
}

// check runs b's checks in dir, writing one line each; built holds the
// document counts of BM25 indexes this get built (nil: open them).
func (o Options) check(ctx context.Context, b Named, dir string, built map[string]int) error {
	for _, c := range b.Checks {
		p := filepath.Join(dir, c.File)
		var got string
		var err error
		if c.Kind == "bm25" {
			got, err = o.checkBM25(ctx, b, c, p, built)
		} else {
			got, err = runCheck(ctx, c, p)
		}
		if err != nil {
			return fmt.Errorf("check %s of %s: %w (run orchestrate data get %s again)", c.Kind, p, err, b.Name)
		}
		fmt.Fprintf(o.Out, "  check %s/%s: %s\n", b.Name, c.File, got)
	}
	return nil
}

// checkBM25 compares the document count of the index the bundle's bm25
// step built at p: the count the build gave, or, for an index built
// before, the one opening it gives (it is not built again).
func (o Options) checkBM25(ctx context.Context, b Named, c Check, p string, built map[string]int) (string, error) {
	for _, s := range b.Make {
		if s.Kind == "bm25" && s.To == c.File && len(s.From) == 1 && o.BuildBM25 != nil {
			n, ok := built[c.File]
			if !ok {
				var err error
				if n, err = o.BuildBM25(ctx, filepath.Join(o.Dir, s.From[0]), p); err != nil {
					return "", err
				}
			}
			if c.Docs > 0 && int64(n) != c.Docs || n == 0 {
				return "", fmt.Errorf("the index holds %d documents, want %d", n, c.Docs)
			}
			return fmt.Sprintf("%d documents", n), nil
		}
	}
	return "", errors.New("no bm25 step makes it, or no BM25 builder")
}

func runCheck(ctx context.Context, c Check, p string) (string, error) {
	switch c.Kind {
	case "lines":
		n, err := countLines(ctx, p)
		if err != nil {
			return "", err
		}
		if c.Lines > 0 && n != c.Lines || n == 0 {
			return "", fmt.Errorf("%d lines, want %d", n, c.Lines)
		}
		return fmt.Sprintf("%d lines", n), nil
	case "parquet":
		return checkParquet(p, c)
	case "questions":
		qs, err := dataset.Load(p)
		if err != nil {
			return "", err
		}
		if c.Questions > 0 && len(qs) != c.Questions {
			return "", fmt.Errorf("%d questions, want %d", len(qs), c.Questions)
		}
		return fmt.Sprintf("%d questions", len(qs)), nil
	case "faiss":
		n, d, err := FaissHeader(p)
		if err != nil {
			return "", err
		}
		if c.Vectors > 0 && n != c.Vectors || n == 0 {
			return "", fmt.Errorf("the index holds %d vectors, want %d (the corpus's passages)", n, c.Vectors)
		}
		return fmt.Sprintf("%d vectors of dimension %d", n, d), nil
	}
	return "", fmt.Errorf("unknown check %q", c.Kind)
}

func countLines(ctx context.Context, p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		k, err := f.Read(buf)
		for _, c := range buf[:k] {
			if c == '\n' {
				n++
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

func checkParquet(p string, c Check) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return "", fmt.Errorf("not a parquet file: %w", err)
	}
	var cols []string
	for _, fl := range pf.Schema().Fields() {
		cols = append(cols, fl.Name())
	}
	for _, want := range c.Columns {
		if !slices.Contains(cols, want) {
			return "", fmt.Errorf("no column %q (it has %s)", want, strings.Join(cols, ", "))
		}
	}
	rows := pf.NumRows()
	if c.Rows > 0 && rows != c.Rows || rows == 0 {
		return "", fmt.Errorf("%d rows, want %d", rows, c.Rows)
	}
	return fmt.Sprintf("%d rows, columns %s", rows, strings.Join(cols, ", ")), nil
}

// FaissHeader reads the vector count and dimension from the header of a
// faiss flat index file, as faiss's write_index writes it
// (faiss/impl/index_write.cpp write_index_header): a four-byte type code
// ("IxFI" inner product, "IxF2" L2), then d (int32), ntotal (int64),
// little-endian. No faiss needed.
func FaissHeader(p string) (ntotal int64, d int32, err error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var h [16]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0, 0, fmt.Errorf("a faiss header is 16 bytes or more: %w", err)
	}
	if code := string(h[:4]); code != "IxFI" && code != "IxF2" {
		return 0, 0, fmt.Errorf("type code %q: not a faiss flat index (IxFI, IxF2)", code)
	}
	d = int32(binary.LittleEndian.Uint32(h[4:8]))
	ntotal = int64(binary.LittleEndian.Uint64(h[8:16]))
	return ntotal, d, nil
}

// human writes a byte count for people.
func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
