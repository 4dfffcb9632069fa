package transport

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
)

// An attempt that hangs past its own deadline, one whose connection is
// reset, and a 2xx answer that does not decode are all sent again.
func TestTransientFaultsAreRetried(t *testing.T) {
	s := fake.New(t)
	var n atomic.Int32
	s.Handle("/x", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch n.Add(1) {
		case 1: // hang past the attempt deadline
			select {
			case <-r.Context().Done():
			case <-s.Stopped():
			}
		case 2: // reset the connection
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("no hijacker")
				return
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close()
			}
		case 3: // a cut-short body
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok": tr`))
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok": true}`))
		}
	})
	o := testOptions("judge", s.URL)
	o.Timeout = 200 * time.Millisecond
	o.Retries = 4
	var retries atomic.Int32
	o.OnRetry = func(string, int, int) { retries.Add(1) }
	c := newClient(t, o)
	var out struct{ OK bool }
	if err := c.Do(context.Background(), http.MethodPost, "/x", map[string]int{"a": 1}, &out); err != nil || !out.OK {
		t.Fatalf("err %v, out %+v after %d attempts", err, out, n.Load())
	}
	if n.Load() != 4 || retries.Load() != 3 {
		t.Fatalf("%d attempts, %d retries; want 4 and 3", n.Load(), retries.Load())
	}
}

// A body that never decodes fails after the retries, naming the problem.
func TestMalformedBodyGivesUp(t *testing.T) {
	s := fake.New(t)
	var n atomic.Int32
	s.Handle("/x", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		n.Add(1)
		_, _ = w.Write([]byte(`<html>`))
	})
	o := testOptions("retriever", s.URL)
	o.Retries = 2
	c := newClient(t, o)
	var out map[string]any
	err := c.Do(context.Background(), http.MethodPost, "/x", nil, &out)
	if err == nil || !strings.Contains(err.Error(), "decode response") || !strings.Contains(err.Error(), s.URL+"/x") {
		t.Fatalf("err %v", err)
	}
	if n.Load() != 3 {
		t.Fatalf("%d attempts, want 3", n.Load())
	}
}
