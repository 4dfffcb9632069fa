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
	"strconv"
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
