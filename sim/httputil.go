package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
)

// Fingerprint labels simulated responses in their bodies.
const Fingerprint = "hindsearch-simulator"

// IgnoredFieldsHeader lists, on an answer of a simulated vLLM, SGLang or
// judge route, the request's top-level fields that the server ignored
// (comma-separated), as vLLM logs "The following fields were present in
// the request but ignored".
const IgnoredFieldsHeader = "X-Hindsearch-Ignored-Fields"

// decodeLenient decodes a JSON request body the way vLLM's OpenAI server
// and SGLang's routes read theirs: a field the request model does not have
// is accepted and ignored (a misspelt field does nothing; what it meant to
// set keeps its default). It returns the ignored top-level field names,
// sorted, for the caller to record and report; a body that is not a JSON
// object of the right field types is an error.
func decodeLenient(r *http.Request, v any) ([]string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, httpx.MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if len(body) > httpx.MaxBody {
		return nil, fmt.Errorf("body over %d bytes", httpx.MaxBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, fmt.Errorf("invalid request body: %w", err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return nil, fmt.Errorf("invalid request body: %w", err)
	}
	known := map[string]bool{}
	jsonFields(reflect.TypeOf(v), known)
	var ignored []string
	for k := range keys {
		if !known[k] {
			ignored = append(ignored, k)
		}
	}
	sort.Strings(ignored)
	return ignored, nil
}

// jsonFields adds the JSON names of struct type t's fields (those of
// embedded structs included) to known.
func jsonFields(t reflect.Type, known map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			jsonFields(f.Type, known)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		known[name] = true
	}
}

// ignoredFields counts, per route, the request fields a simulated server
// accepted and ignored.
type ignoredFields struct {
	mu     sync.Mutex
	counts map[string]int
}

// decode is decodeLenient of r's body into v, noting the fields it ignored
// under route (the "METHOD /path" of the handler).
func (f *ignoredFields) decode(w http.ResponseWriter, r *http.Request, route string, v any) error {
	ignored, err := decodeLenient(r, v)
	f.note(w, route, ignored)
	return err
}

// note records fields ignored on route and names them in the answer's
// IgnoredFieldsHeader.
func (f *ignoredFields) note(w http.ResponseWriter, route string, fields []string) {
	if len(fields) == 0 {
		return
	}
	w.Header().Set(IgnoredFieldsHeader, strings.Join(fields, ","))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts == nil {
		f.counts = map[string]int{}
	}
	for _, k := range fields {
		f.counts[route+" "+k]++
	}
}

// snapshot returns "ROUTE FIELD" -> requests that carried the ignored field.
func (f *ignoredFields) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.counts))
	for k, n := range f.counts {
		out[k] = n
	}
	return out
}

// openAIError writes an OpenAI-style error body, as vLLM does.
func openAIError(w http.ResponseWriter, status int, typ, msg string) {
	httpx.WriteJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "code": status,
	}, "object": "error", "message": msg, "type": typ, "code": status})
}

// sleepCtx waits d, or until ctx is done (then it reports false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// freshConns tracks, for http.Server.ConnState, the connections that have
// not sent a request yet (a client Transport's spare dial), which
// http.Server.Shutdown waits for until they are 5 s old.
type freshConns struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

// track is an http.Server.ConnState hook.
func (f *freshConns) track(c net.Conn, st http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st == http.StateNew {
		if f.m == nil {
			f.m = map[net.Conn]struct{}{}
		}
		f.m[c] = struct{}{}
		return
	}
	delete(f.m, c)
}

// closeAll closes the connections that have not sent a request yet.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.m {
		_ = c.Close()
	}
	f.m = nil
}
