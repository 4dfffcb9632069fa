// Package httpx holds the HTTP helpers that every simulated server shares
// (the policy, judge and trainer, in sim and sim/trainer): the simulator
// header that labels their answers, the strict JSON request decoder and the
// one-write JSON answer.
package httpx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// SimulatorHeader is set on every response of a simulated server, so that
// no output of the simulator can be mistaken for a real model's.
const SimulatorHeader = "X-Hindsearch-Simulator"

// MaxBody is the most bytes a simulated server reads of a request body.
const MaxBody = 64 << 20

// DecodeStrict decodes a JSON request body into v, rejecting unknown
// fields, so the simulator accepts exactly the documented wire formats; a
// body over MaxBody bytes is an error.
func DecodeStrict(r *http.Request, v any) error {
	return decode(r, v, true)
}

// Decode is DecodeStrict ignoring fields it does not know, as pydantic's
// default does (SkyRL's request models keep it).
func Decode(r *http.Request, v any) error {
	return decode(r, v, false)
}

func decode(r *http.Request, v any, strict bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(body) > MaxBody {
		return fmt.Errorf("body over %d bytes", MaxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid request body: %w", err)
	}
	return nil
}

// WriteJSON answers v as JSON with status, the SimulatorHeader and a
// Content-Length, in one write, as uvicorn sends a JSONResponse (net/http
// would switch a body over 2 KB to chunked encoding, written in pieces). A
// v that does not encode is answered 500.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 {
			buf.Reset()
			jsonBufs.Put(buf)
		}
	}()
	h := w.Header()
	h.Set(SimulatorHeader, "true")
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		http.Error(w, "encode answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// jsonBufs holds WriteJSON's buffers.
var jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Labelled returns h with the SimulatorHeader set on every answer, those h
// writes itself included.
func Labelled(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(SimulatorHeader, "true")
		h.ServeHTTP(w, r)
	})
}

// IgnoredFieldsHeader lists, on an answer of a simulated vLLM, SGLang,
// judge or trainer route, the request's top-level fields that the server ignored
// (comma-separated), as vLLM logs "The following fields were present in
// the request but ignored".
const IgnoredFieldsHeader = "X-Hindsearch-Ignored-Fields"

// DecodeLenient decodes a JSON request body the way vLLM's OpenAI server,
// SGLang's routes and SkyRL's pydantic request models read theirs: a field the request model does not have
// is accepted and ignored (a misspelt field does nothing; what it meant to
// set keeps its default). It returns the ignored top-level field names,
// sorted, for the caller to record and report; a body that is not a JSON
// object of the right field types is an error.
func DecodeLenient(r *http.Request, v any) ([]string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if len(body) > MaxBody {
		return nil, fmt.Errorf("body over %d bytes", MaxBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, fmt.Errorf("invalid request body: %w", err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return nil, fmt.Errorf("invalid request body: %w", err)
	}
	known := map[string]bool{}
	JSONFields(reflect.TypeOf(v), known)
	var ignored []string
	for k := range keys {
		if !known[k] {
			ignored = append(ignored, k)
		}
	}
	sort.Strings(ignored)
	return ignored, nil
}

// JSONFields adds the JSON names of struct type t's fields (those of
// embedded structs included) to known.
func JSONFields(t reflect.Type, known map[string]bool) {
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
			JSONFields(f.Type, known)
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

// IgnoredFields counts, per route, the request fields a simulated server
// accepted and ignored.
type IgnoredFields struct {
	mu     sync.Mutex
	counts map[string]int
}

// Decode is DecodeLenient of r's body into v, noting the fields it ignored
// under route (the "METHOD /path" of the handler).
func (f *IgnoredFields) Decode(w http.ResponseWriter, r *http.Request, route string, v any) error {
	ignored, err := DecodeLenient(r, v)
	f.Note(w, route, ignored)
	return err
}

// Note records fields ignored on route and names them in the answer's
// IgnoredFieldsHeader.
func (f *IgnoredFields) Note(w http.ResponseWriter, route string, fields []string) {
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

// Snapshot returns "ROUTE FIELD" -> requests that carried the ignored field.
func (f *IgnoredFields) Snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.counts))
	for k, n := range f.counts {
		out[k] = n
	}
	return out
}
