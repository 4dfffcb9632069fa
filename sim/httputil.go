package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// SimulatorHeader is set on every response of a simulated server, so that
// no output of the simulator can be mistaken for a real model's.
const SimulatorHeader = "X-Hindsearch-Simulator"

// Fingerprint labels simulated responses in their bodies.
const Fingerprint = "hindsearch-simulator"

const maxBody = 64 << 20

// decodeStrict decodes a JSON request body, rejecting unknown fields, so the
// simulator accepts exactly the documented wire formats.
func decodeStrict(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("body over %d bytes", maxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid request body: %w", err)
	}
	return nil
}

// writeJSON answers v as JSON with a Content-Length, in one write, as
// uvicorn sends a JSONResponse (net/http would switch a body over 2 KB to
// chunked encoding, written in pieces).
func writeJSON(w http.ResponseWriter, status int, v any) {
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

// jsonBufs holds writeJSON's buffers.
var jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// openAIError writes an OpenAI-style error body, as vLLM does.
func openAIError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
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

func labelled(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(SimulatorHeader, "true")
		h.ServeHTTP(w, r)
	})
}
