package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
)

// DelayedRetriever wraps a Search-R1 retriever handler (such as
// bm25.Index.Handler) with a simulated latency: each POST /retrieve call
// waits Batch plus PerQuery per query of its body before the wrapped
// handler answers it. Other routes pass straight through. It counts the
// calls and queries it has seen.
type DelayedRetriever struct {
	h        http.Handler
	batch    time.Duration
	perQuery time.Duration
	calls    atomic.Int64
	queries  atomic.Int64
}

// NewDelayedRetriever wraps h with batch latency per /retrieve call and
// perQuery latency per query of a call (Latency.RetrieverBatch,
// Latency.RetrieverQuery); zero delays only count.
func NewDelayedRetriever(h http.Handler, batch, perQuery time.Duration) *DelayedRetriever {
	return &DelayedRetriever{h: h, batch: batch, perQuery: perQuery}
}

// DelayRetriever is NewDelayedRetriever as a plain http.Handler.
func DelayRetriever(h http.Handler, batch, perQuery time.Duration) http.Handler {
	return NewDelayedRetriever(h, batch, perQuery)
}

// Stats returns the /retrieve calls and the queries in them seen so far
// (a call is counted when it arrives, before its delay).
func (d *DelayedRetriever) Stats() (calls, queries int64) {
	return d.calls.Load(), d.queries.Load()
}

// ServeHTTP delays POST /retrieve by the call's latency (returning early,
// unanswered, if the client leaves) and passes every request on with its
// body intact.
func (d *DelayedRetriever) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/retrieve" {
		d.h.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, httpx.MaxBody+1))
	_ = r.Body.Close()
	if err != nil {
		http.Error(w, `{"detail":"read body"}`, http.StatusBadRequest)
		return
	}
	// A body that does not parse counts no queries: the wrapped handler
	// answers it with its own error.
	var req struct {
		Queries []json.RawMessage `json:"queries"`
	}
	_ = json.Unmarshal(body, &req)
	n := len(req.Queries)
	d.calls.Add(1)
	d.queries.Add(int64(n))
	if !sleepCtx(r.Context(), d.batch+d.perQuery*time.Duration(n)) {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	d.h.ServeHTTP(w, r)
}
