// Package hub is the client of the Hugging Face hub's file routes, spoken
// as huggingface_hub's file_download.py speaks them (docs/research/hf-hub.md):
// a HEAD of {endpoint}/[datasets/]{repo}/resolve/{revision}/{path}
// without following redirects gives the commit (X-Repo-Commit), the etag
// (X-Linked-Etag for an LFS file, whose value is its sha256; else ETag)
// and the size (X-Linked-Size, else Content-Length); the file is fetched
// into huggingface_hub's cache layout, {cache}/{models|datasets}--{org}--
// {name}/blobs/{etag} with snapshots/{commit}/{path} a relative link to it
// and refs/{revision} naming the commit, so files fetched by
// huggingface-cli are reused and Python tools find ours. A partial file
// ({blob}.incomplete) is resumed with a Range request; a large one is
// fetched in parallel ranges; an LFS file's sha256 is checked before it is
// moved into place.
package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// DefaultEndpoint is the hub's URL when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// Repo types.
const (
	Model   = "model"
	Dataset = "dataset"
)

// File names one file of a hub repository.
type File struct {
	// Repo is "org/name"; Type is Model or Dataset.
	Repo, Type string
	// Revision is a branch, tag or commit ("" is "main").
	Revision string
	// Path is the file's path in the repository.
	Path string
}

func (f File) revision() string {
	if f.Revision == "" {
		return "main"
	}
	return f.Revision
}

// String names the file as hub://type/repo@revision/path.
func (f File) String() string {
	return fmt.Sprintf("%s %s@%s/%s", f.Type, f.Repo, f.revision(), f.Path)
}

// resolvePath is the file's resolve route under the endpoint, its
// revision and path quoted as huggingface_hub quotes them.
func (f File) resolvePath() string {
	prefix := ""
	if f.Type == Dataset {
		prefix = "/datasets"
	}
	return fmt.Sprintf("%s/%s/resolve/%s/%s", prefix, f.Repo, url.PathEscape(f.revision()), escapePath(f.Path))
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// Meta is what the hub says of a file before it is fetched.
type Meta struct {
	// Commit is the commit the revision resolves to (X-Repo-Commit).
	Commit string
	// Etag is the blob's name in the cache: an LFS file's sha256
	// (X-Linked-Etag), else the git blob's etag.
	Etag string
	// SHA256 is set for an LFS file (its etag): the hash the bytes must
	// have.
	SHA256 string
	// Size is the file's size (X-Linked-Size, else Content-Length).
	Size int64
}

// Client speaks to one hub endpoint.
type Client struct {
	tc *transport.Client
	// Parallel is how many ranges a large file is fetched in at once
	// (DefaultParallel when zero; 1: one stream).
	Parallel int
	// MinPart is the smallest range of a parallel fetch (DefaultMinPart
	// when zero): a file smaller than twice it is fetched in one stream.
	MinPart int64
	// Tries bounds the requests one range (or the single stream) makes
	// after its connection drops, each resuming where the last stopped
	// (DefaultTries when zero).
	Tries int
	// Progress, when set, is told each file's bytes fetched so far (in
	// this process) as they grow.
	Progress func(f File, done, total int64)

	prog progress
}

// Defaults of Client's settings.
const (
	DefaultParallel = 8
	DefaultMinPart  = 64 << 20
	DefaultTries    = 8
)

// New returns the client of the hub at endpoint ("" is HF_ENDPOINT's
// value in environ, else DefaultEndpoint), sending token (HF_TOKEN, or
// the token file: see Token) as "Authorization: Bearer" when not empty.
// opts.Timeout should be 0: a file takes as long as it takes.
func New(endpoint, token string, opts transport.Options) (*Client, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	opts.BaseURL = strings.TrimRight(endpoint, "/")
	if opts.Role == "" {
		opts.Role = "hub"
	}
	if token != "" {
		h := map[string]string{}
		for k, v := range opts.Headers {
			h[k] = v
		}
		h["Authorization"] = "Bearer " + token
		opts.Headers = h
	}
	tc, err := transport.New(opts)
	if err != nil {
		return nil, err
	}
	return &Client{tc: tc}, nil
}

// Token returns the hub token as huggingface_hub finds it: HF_TOKEN, else
// the legacy HUGGING_FACE_HUB_TOKEN, else the token file HF_TOKEN_PATH,
// else HF_HOME/token (HF_HOME: else XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface), trimmed; "" when none.
func Token(env map[string]string) string {
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(env[k]); t != "" {
			return t
		}
	}
	path := env["HF_TOKEN_PATH"]
	if path == "" {
		path = filepath.Join(Home(env), "token")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Home is HF_HOME as huggingface_hub resolves it (constants.py): HF_HOME,
// else XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface, a leading ~
// expanded as os.path.expanduser does.
func Home(env map[string]string) string {
	if h := env["HF_HOME"]; h != "" {
		return expandHome(h, env)
	}
	if x := env["XDG_CACHE_HOME"]; x != "" {
		return filepath.Join(expandHome(x, env), "huggingface")
	}
	return filepath.Join(homeDir(env), ".cache", "huggingface")
}

// Cache is the hub cache directory: HF_HUB_CACHE, else the legacy
// HUGGINGFACE_HUB_CACHE, else Home/hub.
func Cache(env map[string]string) string {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if v := env[k]; v != "" {
			return expandHome(v, env)
		}
	}
	return filepath.Join(Home(env), "hub")
}

// homeDir is HOME, else the user's home directory.
func homeDir(env map[string]string) string {
	if h := env["HOME"]; h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// expandHome expands a leading ~ to homeDir.
func expandHome(p string, env map[string]string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return filepath.Join(homeDir(env), p[1:])
	}
	return p
}

// Error is the hub's refusal of a file: its status and, when the hub
// says, its error code (X-Error-Code: RepoNotFound, GatedRepo,
// EntryNotFound, RevisionNotFound) and message.
type Error struct {
	File    File
	Status  int
	Code    string
	Message string
	err     error
}

// Error says what was refused and why, and what to do for a 401.
func (e *Error) Error() string {
	msg := fmt.Sprintf("hub %s: status %d", e.File, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	switch {
	case e.Status == http.StatusUnauthorized || e.Code == "GatedRepo":
		msg += " (a gated or private repository: accept its terms on the hub and set HF_TOKEN, or log in with huggingface-cli login)"
	case e.Code == "EntryNotFound":
		msg += " (no such file at that revision)"
	}
	return msg
}

// Unwrap returns the transport's error.
func (e *Error) Unwrap() error { return e.err }

func hubError(f File, err error) error {
	var se *transport.StatusError
	if !errors.As(err, &se) {
		return fmt.Errorf("hub %s: %w", f, err)
	}
	e := &Error{File: f, Status: se.Status, err: err}
	if se.Header != nil {
		e.Code, e.Message = se.Header.Get("X-Error-Code"), se.Header.Get("X-Error-Message")
	}
	return e
}

// Meta asks for f's metadata: a HEAD of its resolve URL, not following a
// redirect to the storage backend (whose answer lacks the hub's
// headers), following a relative one (a renamed repository) on the hub.
func (c *Client) Meta(ctx context.Context, f File) (Meta, error) {
	target := f.resolvePath()
	for hop := 0; ; hop++ {
		resp, err := c.tc.Stream(ctx, transport.Call{NoRedirect: true}, http.MethodHead, target, map[string]string{"Accept-Encoding": "identity"})
		if err != nil {
			return Meta{}, hubError(f, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode <= 399 && resp.Header.Get("X-Repo-Commit") == "" {
			loc := resp.Header.Get("Location")
			if loc == "" || hop >= 5 || strings.Contains(loc, "://") {
				return Meta{}, fmt.Errorf("hub %s: a %d without the hub's headers (Location %q)", f, resp.StatusCode, loc)
			}
			target = loc // the same host: a renamed repository
			continue
		}
		h := resp.Header
		m := Meta{Commit: h.Get("X-Repo-Commit")}
		etag := h.Get("X-Linked-Etag")
		if etag != "" {
			m.Etag = normalizeEtag(etag)
			m.SHA256 = m.Etag
		} else {
			m.Etag = normalizeEtag(h.Get("ETag"))
		}
		size := h.Get("X-Linked-Size")
		if size == "" {
			size = h.Get("Content-Length")
		}
		m.Size, _ = strconv.ParseInt(size, 10, 64)
		switch {
		case m.Commit == "":
			return Meta{}, fmt.Errorf("hub %s: no X-Repo-Commit in the answer: not a hub (HF_ENDPOINT?)", f)
		case m.Etag == "":
			return Meta{}, fmt.Errorf("hub %s: no ETag in the answer", f)
		case m.SHA256 != "" && !reSHA256.MatchString(m.SHA256):
			m.SHA256 = "" // an LFS etag that is not a sha256: nothing to check
		}
		return m, nil
	}
}

var reSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// normalizeEtag drops a weak prefix and the quotes
// (huggingface_hub's _normalize_etag).
func normalizeEtag(e string) string {
	return strings.Trim(strings.TrimPrefix(strings.TrimSpace(e), "W/"), `"`)
}

// RepoFolder is a repository's folder in the cache:
// {models|datasets}--{org}--{name}.
func RepoFolder(repo, typ string) string {
	return typ + "s--" + strings.ReplaceAll(repo, "/", "--")
}

// Result is a file in the cache.
type Result struct {
	// Path is snapshots/{commit}/{path} in the cache (a link to the blob).
	Path string
	Meta Meta
	// Fetched is false when the file was in the cache already (only its
	// metadata was asked for).
	Fetched bool
}

// Get puts f into the cache at dir and returns where: a file already
// there costs one metadata request; a partial one is resumed; an LFS
// file whose bytes do not have its sha256 is deleted and refused.
func (c *Client) Get(ctx context.Context, f File, dir string) (Result, error) {
	m, err := c.Meta(ctx, f)
	if err != nil {
		return Result{}, err
	}
	return c.Fetch(ctx, f, m, dir)
}

// Fetch is Get with f's metadata already asked for (Meta): a caller that
// planned with it makes no second metadata request.
func (c *Client) Fetch(ctx context.Context, f File, m Meta, dir string) (Result, error) {
	repo := filepath.Join(dir, RepoFolder(f.Repo, f.Type))
	blob := filepath.Join(repo, "blobs", m.Etag)
	pointer := filepath.Join(repo, "snapshots", m.Commit, filepath.FromSlash(f.Path))
	res := Result{Path: pointer, Meta: m}
	if st, err := os.Stat(pointer); err == nil && st.Size() == m.Size {
		return res, writeRef(repo, f.revision(), m.Commit)
	}
	if st, err := os.Stat(blob); err != nil || st.Size() != m.Size {
		if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
			return Result{}, err
		}
		if err := c.fetch(ctx, f, m, blob); err != nil {
			return Result{}, err
		}
		res.Fetched = true
	}
	if err := link(blob, pointer); err != nil {
		return Result{}, err
	}
	return res, writeRef(repo, f.revision(), m.Commit)
}

// link makes pointer a relative symlink to blob (huggingface_hub's
// _create_symlink), replacing what is there.
func link(blob, pointer string) error {
	if err := os.MkdirAll(filepath.Dir(pointer), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(pointer), blob)
	if err != nil {
		return err
	}
	_ = os.Remove(pointer)
	return os.Symlink(rel, pointer)
}

// writeRef records that revision resolves to commit (not for a revision
// that is the commit itself).
func writeRef(repo, revision, commit string) error {
	if revision == commit {
		return nil
	}
	ref := filepath.Join(repo, "refs", filepath.FromSlash(revision))
	if b, err := os.ReadFile(ref); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
		return err
	}
	return os.WriteFile(ref, []byte(commit), 0o644)
}

// fetch downloads f into blob, by way of blob.incomplete, and checks its
// size and (LFS) sha256 before moving it into place.
func (c *Client) fetch(ctx context.Context, f File, m Meta, blob string) error {
	part := blob + ".incomplete"
	parallel := c.Parallel
	if parallel <= 0 {
		parallel = DefaultParallel
	}
	minPart := c.MinPart
	if minPart <= 0 {
		minPart = DefaultMinPart
	}
	var err error
	if parallel > 1 && m.Size >= 2*minPart {
		err = c.fetchRanges(ctx, f, m, part, parallel, minPart)
	} else {
		err = c.fetchStream(ctx, f, m, part)
	}
	if err != nil {
		return err
	}
	if st, err := os.Stat(part); err != nil || st.Size() != m.Size {
		_ = os.Remove(part)
		return fmt.Errorf("hub %s: %d bytes arrived, the hub announced %d: the partial file was deleted", f, sizeOf(part), m.Size)
	}
	if m.SHA256 != "" {
		got, err := FileSHA256(part)
		if err != nil {
			return err
		}
		if got != m.SHA256 {
			_ = os.Remove(part)
			_ = os.Remove(part + ".parts")
			return fmt.Errorf("hub %s: sha256 %s, the hub's is %s: the download is corrupt and was deleted; run the command again", f, got, m.SHA256)
		}
	}
	_ = os.Remove(part + ".parts")
	return os.Rename(part, blob)
}

func sizeOf(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// FileSHA256 is the hex sha256 of the bytes of the file at p: an LFS
// file's etag on the hub (checked before a download is moved into
// place), and the hash a subset manifest records of a question file.
func FileSHA256(p string) (string, error) {
	fh, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fetchStream fetches f into part in one stream, resuming from part's
// size (Range: bytes=N-) after a dropped connection or a kill.
func (c *Client) fetchStream(ctx context.Context, f File, m Meta, part string) error {
	tries := c.tries()
	for try := 0; ; try++ {
		done := sizeOf(part)
		if done >= m.Size && m.Size > 0 {
			return nil
		}
		err := c.getRange(ctx, f, m, part, done, m.Size-1, true)
		if err == nil || try+1 >= tries || ctx.Err() != nil || isRefusal(err) {
			return err
		}
		c.wait(ctx, try)
	}
}

func (c *Client) tries() int {
	if c.Tries <= 0 {
		return DefaultTries
	}
	return c.Tries
}

func (c *Client) wait(ctx context.Context, try int) {
	t := time.NewTimer(c.tc.Backoff(try))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func isRefusal(err error) bool {
	var he *Error
	return errors.As(err, &he) && he.Status >= 400 && he.Status < 500
}

// getRange fetches bytes [from, to] of f into part at offset from. With
// appendMode the server may answer 200 with the whole file (no range
// support): part then starts over.
func (c *Client) getRange(ctx context.Context, f File, m Meta, part string, from, to int64, appendMode bool) error {
	headers := map[string]string{"Accept-Encoding": "identity"}
	if from > 0 || to < m.Size-1 {
		headers["Range"] = fmt.Sprintf("bytes=%d-%d", from, to)
	}
	resp, err := c.tc.Stream(ctx, transport.Call{}, http.MethodGet, f.resolvePath(), headers)
	if err != nil {
		return hubError(f, err)
	}
	defer resp.Body.Close()
	fh, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer fh.Close()
	off := from
	if resp.StatusCode == http.StatusOK {
		if !appendMode && (from > 0 || to < m.Size-1) {
			return fmt.Errorf("hub %s: the server answered a range request with the whole file", f)
		}
		off = 0
		if err := fh.Truncate(0); err != nil {
			return err
		}
	}
	w := &offsetWriter{f: fh, off: off, progress: func(n int64) { c.note(f, n, m.Size) }}
	_, err = io.Copy(w, resp.Body)
	if err != nil {
		return fmt.Errorf("hub %s: transfer stopped at byte %d: %w", f, w.off, err)
	}
	if appendMode && w.off != to+1 {
		return fmt.Errorf("hub %s: transfer ended at byte %d of %d", f, w.off, to+1)
	}
	return nil
}

// offsetWriter writes at increasing offsets of a file.
type offsetWriter struct {
	f        *os.File
	off      int64
	progress func(n int64)
}

func (w *offsetWriter) Write(b []byte) (int, error) {
	n, err := w.f.WriteAt(b, w.off)
	w.off += int64(n)
	if w.progress != nil {
		w.progress(int64(n))
	}
	return n, err
}

// progress counts bytes written per file for Progress.
type progress struct {
	mu   sync.Mutex
	done map[string]int64
}

func (c *Client) note(f File, n, total int64) {
	if c.Progress == nil {
		return
	}
	c.prog.mu.Lock()
	if c.prog.done == nil {
		c.prog.done = map[string]int64{}
	}
	k := f.String()
	c.prog.done[k] += n
	d := c.prog.done[k]
	c.prog.mu.Unlock()
	c.Progress(f, d, total)
}

// partsState is the record of a parallel fetch beside the partial file
// (blob.incomplete.parts): the part size and which parts are complete, so
// that a killed fetch resumes the missing ones only.
type partsState struct {
	PartSize int64  `json:"part_size"`
	Size     int64  `json:"size"`
	Done     []bool `json:"done"`
}

// fetchRanges fetches f in parts of at least minPart bytes, parallel at
// a time, each written at its offset of part and recorded done in
// part.parts.
func (c *Client) fetchRanges(ctx context.Context, f File, m Meta, part string, parallel int, minPart int64) error {
	partSize := max(minPart, (m.Size+int64(parallel)*4-1)/(int64(parallel)*4))
	n := int((m.Size + partSize - 1) / partSize)
	state := partsState{PartSize: partSize, Size: m.Size, Done: make([]bool, n)}
	if b, err := os.ReadFile(part + ".parts"); err == nil {
		var old partsState
		if json.Unmarshal(b, &old) == nil && old.PartSize == partSize && old.Size == m.Size && len(old.Done) == n {
			state = old
		}
	} else {
		_ = os.Remove(part) // a partial file of another layout: start over
	}
	fh, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := fh.Truncate(m.Size); err != nil {
		fh.Close()
		return err
	}
	fh.Close()
	var mu sync.Mutex
	save := func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		state.Done[i] = true
		b, _ := json.Marshal(state)
		return os.WriteFile(part+".parts", b, 0o644)
	}
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				from := int64(i) * partSize
				to := min(from+partSize, m.Size) - 1
				var err error
				for try := 0; try < c.tries(); try++ {
					if err = c.getRange(ctx, f, m, part, from, to, false); err == nil || ctx.Err() != nil || isRefusal(err) {
						break
					}
					c.wait(ctx, try)
				}
				if err == nil {
					err = save(i)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i, done := range state.Done {
		if !done {
			select {
			case work <- i:
			case <-ctx.Done():
			}
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}
