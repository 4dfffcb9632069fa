// Package hubtest is a fake Hugging Face hub for tests, on loopback: it
// answers the resolve route as the hub does (docs/research/hf-hub.md): a
// HEAD or GET of /[datasets/]{repo}/resolve/{revision}/{path} gives
// X-Repo-Commit and, for an LFS file, X-Linked-Etag (the sha256) and
// X-Linked-Size with a 302 to the storage backend (here /cdn/{sha256} on
// the same server), or for a regular file its ETag and the bytes; range
// requests are honoured; a gated repository answers 401 GatedRepo without
// the token; unknown repositories, revisions and files answer 404 with
// their X-Error-Code. It can drop a connection mid-file and serve wrong
// bytes on command, and counts the requests.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hub is a fake hub.
type Hub struct {
	*httptest.Server
	mu    sync.Mutex
	repos map[string]*repo
	// Token, when set, is what gated repositories require.
	Token string
	// DropAfter, when above 0, makes the next GETs of file bytes close
	// the connection after that many bytes (DropTimes of them).
	DropAfter, DropTimes int
	// Corrupt makes file bytes served with their first byte flipped.
	Corrupt bool
	// Requests counts requests by method ("HEAD", "GET").
	Requests map[string]int
	// Ranged counts the answers of file bytes to a Range header.
	Ranged int
	// Throttle, when above 0, limits each answer of file bytes to that
	// many bytes a second (a storage backend's per-connection rate).
	Throttle int
}

type repo struct {
	typ, commit string
	gated       bool
	files       map[string][]byte
	lfs         map[string]bool
}

// New starts a fake hub that closes when the test ends.
func New(t testing.TB) *Hub {
	h := &Hub{repos: map[string]*repo{}, Requests: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

// Add puts a file into repository name of typ ("model" or "dataset"),
// as LFS (served from the storage backend, its sha256 its etag) or not;
// the repository's main revision gets commit (a fixed 40-hex string).
func (h *Hub) Add(typ, name, path string, data []byte, lfs, gated bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := typ + "/" + name
	r := h.repos[key]
	if r == nil {
		sum := sha1.Sum([]byte(key))
		r = &repo{typ: typ, commit: hex.EncodeToString(sum[:]), files: map[string][]byte{}, lfs: map[string]bool{}}
		h.repos[key] = r
	}
	r.files[path] = data
	r.lfs[path] = lfs
	r.gated = r.gated || gated
}

// Commit returns the commit main resolves to in the repository.
func (h *Hub) Commit(typ, name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.repos[typ+"/"+name].commit
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, msg, status)
}

func (h *Hub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.Requests[r.Method]++
	h.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/cdn/") {
		h.cdn(w, r, strings.TrimPrefix(r.URL.Path, "/cdn/"))
		return
	}
	typ, path := "model", strings.TrimPrefix(r.URL.Path, "/")
	if rest, ok := strings.CutPrefix(path, "datasets/"); ok {
		typ, path = "dataset", rest
	}
	parts := strings.SplitN(path, "/", 5) // org, name, "resolve", revision, file
	if len(parts) != 5 || parts[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	rp := h.repos[typ+"/"+parts[0]+"/"+parts[1]]
	h.mu.Unlock()
	switch {
	case rp == nil:
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository Not Found for url: "+r.URL.Path)
		return
	case rp.gated && r.Header.Get("Authorization") != "Bearer "+h.Token:
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to this repository is restricted")
		return
	case parts[3] != "main" && parts[3] != rp.commit:
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+parts[3])
		return
	}
	data, ok := rp.files[parts[4]]
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	w.Header().Set("X-Repo-Commit", rp.commit)
	if rp.lfs[parts[4]] {
		w.Header().Set("X-Linked-Etag", `"`+sha(data)+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		w.Header().Set("ETag", `"`+sha(data)[:40]+`"`)
		w.Header().Set("Location", h.URL+"/cdn/"+sha(data))
		w.WriteHeader(http.StatusFound)
		return
	}
	sum := sha1.Sum(data)
	w.Header().Set("ETag", `W/"`+hex.EncodeToString(sum[:])+`"`)
	h.bytes(w, r, data)
}

func (h *Hub) cdn(w http.ResponseWriter, r *http.Request, key string) {
	h.mu.Lock()
	var data []byte
	for _, rp := range h.repos {
		for p, b := range rp.files {
			if rp.lfs[p] && sha(b) == key {
				data = b
			}
		}
	}
	h.mu.Unlock()
	if data == nil {
		http.NotFound(w, r)
		return
	}
	h.bytes(w, r, data)
}

// bytes serves data, or the range asked for, as a file server does.
func (h *Hub) bytes(w http.ResponseWriter, r *http.Request, data []byte) {
	from, to := 0, len(data)-1
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		spec, ok := strings.CutPrefix(rg, "bytes=")
		a, b, _ := strings.Cut(spec, "-")
		f, err1 := strconv.Atoi(a)
		t, err2 := strconv.Atoi(b)
		if b == "" {
			t, err2 = len(data)-1, nil
		}
		if !ok || err1 != nil || err2 != nil || f > t || f >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		from, to, status = f, min(t, len(data)-1), http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(data)))
	}
	body := append([]byte(nil), data[from:to+1]...)
	h.mu.Lock()
	if status == http.StatusPartialContent {
		h.Ranged++
	}
	if h.Corrupt && len(body) > 0 {
		body[0] ^= 0xff
	}
	drop := 0
	if h.DropAfter > 0 && h.DropTimes > 0 && r.Method == http.MethodGet && len(body) > h.DropAfter {
		drop = h.DropAfter
		h.DropTimes--
	}
	h.mu.Unlock()
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Accept-Ranges", "bytes")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	if drop > 0 {
		_, _ = w.Write(body[:drop])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
		return
	}
	if h.Throttle > 0 {
		chunk := max(h.Throttle/50, 1)
		for len(body) > 0 {
			n := min(chunk, len(body))
			if _, err := w.Write(body[:n]); err != nil {
				return
			}
			body = body[n:]
			time.Sleep(20 * time.Millisecond)
		}
		return
	}
	_, _ = w.Write(body)
}
