// Package fake is a recording HTTP test server for the role clients' tests:
// it binds 127.0.0.1 only, records every request, answers per path, and can
// be told to fail the next requests with a given status.
package fake

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
)

// Request is one recorded request.
type Request struct {
	// Method is the HTTP method.
	Method string
	// Path is the URL path.
	Path string
	// Header is the request's header.
	Header http.Header
	// Body is the raw request body.
	Body []byte
}

// JSON decodes the body into a generic value (nil when empty).
func (r Request) JSON(t testing.TB) any {
	t.Helper()
	if len(bytes.TrimSpace(r.Body)) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("request %s %s: body is not json: %v: %s", r.Method, r.Path, err, r.Body)
	}
	return v
}

// Handler answers one request; body is the raw request body.
type Handler func(w http.ResponseWriter, r *http.Request, body []byte)

type failure struct {
	path   string // "" for any path
	status int
	header map[string]string
	body   string
}

// Server is a recording test server.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	reqs     []Request
	handlers map[string]Handler
	fails    []failure
	stop     chan struct{}
}

// New starts a server on 127.0.0.1 that is closed when the test ends.
func New(t testing.TB) *Server {
	s := &Server{handlers: map[string]Handler{}, stop: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		close(s.stop)
		s.Server.Close()
	})
	return s
}

// Stopped is closed when the test ends, before the server closes: a handler
// that hangs must return when it is closed.
func (s *Server) Stopped() <-chan struct{} { return s.stop }

// Handle sets the handler of path.
func (s *Server) Handle(path string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[path] = h
}

// HandleJSON makes path answer status with v encoded as JSON.
func (s *Server) HandleJSON(path string, status int, v any) {
	s.Handle(path, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		WriteJSON(w, status, v)
	})
}

// FailNext makes the next n requests to path ("" for any path) answer
// status with the given headers and body, before they reach the handler.
func (s *Server) FailNext(path string, n, status int, header map[string]string, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fails = append(s.fails, failure{path: path, status: status, header: header, body: body})
	}
}

// Requests returns the recorded requests to path ("" for all), in order.
func (s *Server) Requests(path string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.reqs {
		if path == "" || r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	for i, f := range s.fails {
		if f.path == "" || f.path == r.URL.Path {
			s.fails = append(s.fails[:i], s.fails[i+1:]...)
			s.mu.Unlock()
			for k, v := range f.header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(f.status)
			_, _ = io.WriteString(w, f.body)
			return
		}
	}
	h := s.handlers[r.URL.Path]
	s.mu.Unlock()
	if h == nil {
		http.NotFound(w, r)
		return
	}
	h(w, r, body)
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// AssertJSON fails the test unless got (raw JSON) and want (raw JSON)
// decode to equal values.
func AssertJSON(t testing.TB, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not json: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not json: %v: %s", err, want)
	}
	if !reflect.DeepEqual(g, w) {
		cg, _ := json.Marshal(g)
		cw, _ := json.Marshal(w)
		t.Fatalf("json body mismatch\n got: %s\nwant: %s", cg, cw)
	}
}
