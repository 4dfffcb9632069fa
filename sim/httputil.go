package sim

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
)

// Fingerprint labels simulated responses in their bodies.
const Fingerprint = "hindsearch-simulator"

// IgnoredFieldsHeader lists, on an answer of a simulated server, the
// request's top-level fields that the server ignored (httpx).
const IgnoredFieldsHeader = httpx.IgnoredFieldsHeader

// ignoredFields counts, per route, the request fields a simulated server
// accepted and ignored (httpx.IgnoredFields).
type ignoredFields = httpx.IgnoredFields

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
