package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
)

// observer records every Observation of a client.
type observer struct {
	mu  sync.Mutex
	obs []Observation
}

func (o *observer) add(ob Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.obs = append(o.obs, ob)
}

// only returns the one observation made, failing the test otherwise.
func (o *observer) only(t *testing.T) Observation {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.obs) != 1 {
		t.Fatalf("%d observations, want 1: %+v", len(o.obs), o.obs)
	}
	ob := o.obs[0]
	o.obs = nil
	return ob
}

func observed(t *testing.T, role, base string) (*Client, *observer, Options) {
	t.Helper()
	o := testOptions(role, base)
	ob := &observer{}
	o.OnDone = ob.add
	return newClient(t, o), ob, o
}

func TestOnDoneSuccessAndRetries(t *testing.T) {
	s := fake.New(t)
	s.HandleJSON("/v1/completions", 200, map[string]int{"v": 1})
	c, ob, _ := observed(t, "policy", s.URL)

	// A call settled by its first attempt.
	var out map[string]int
	start := time.Now()
	if err := c.Do(context.Background(), http.MethodPost, "/v1/completions", map[string]int{"a": 1}, &out); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	got := ob.only(t)
	if got.Role != "policy" || got.Method != http.MethodPost || got.Path != "/v1/completions" || got.Status != 200 ||
		got.Attempts != 1 || got.Err != nil || got.Duration <= 0 || got.Duration > elapsed {
		t.Fatalf("observation %+v (call took %v)", got, elapsed)
	}

	// Two 503s then success: one observation with three attempts.
	s.FailNext("/v1/completions", 2, 503, nil, "busy")
	if err := c.Do(context.Background(), http.MethodPost, "/v1/completions?x=1", map[string]int{"a": 1}, &out); err != nil {
		t.Fatal(err)
	}
	got = ob.only(t)
	if got.Status != 200 || got.Attempts != 3 || got.Err != nil || got.Path != "/v1/completions" {
		t.Fatalf("retried call: %+v", got)
	}
	if n := len(s.Requests("/v1/completions")); n != 4 {
		t.Fatalf("%d requests, want 4", n)
	}
}

func TestOnDoneFailures(t *testing.T) {
	s := fake.New(t)
	c, ob, o := observed(t, "judge", s.URL)

	// A status that is not retried: one attempt, its status, the error.
	s.FailNext("/x", 1, 400, nil, "bad request")
	err := c.Do(context.Background(), http.MethodGet, "/x", nil, nil)
	got := ob.only(t)
	if !IsStatus(err, 400) || got.Status != 400 || got.Attempts != 1 || got.Err != err || got.Method != http.MethodGet {
		t.Fatalf("400: err %v, observation %+v", err, got)
	}

	// Retries exhausted on 502: every attempt counted, the last status.
	s.FailNext("/x", 10, 502, nil, "bad gateway")
	err = c.Do(context.Background(), http.MethodGet, "/x", nil, nil)
	got = ob.only(t)
	if !IsStatus(err, 502) || got.Status != 502 || got.Attempts != o.Retries+1 || got.Err != err {
		t.Fatalf("502: err %v, observation %+v", err, got)
	}

	// A 2xx answer that never decodes: retried, status 200, the decode error.
	var n atomic.Int32
	s.Handle("/garbled", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		n.Add(1)
		_, _ = w.Write([]byte(`{"cut`))
	})
	var out map[string]any
	err = c.Do(context.Background(), http.MethodPost, "/garbled", map[string]int{}, &out)
	got = ob.only(t)
	if err == nil || !strings.Contains(err.Error(), "decode response") || got.Status != 200 ||
		got.Attempts != int(n.Load()) || got.Attempts != o.Retries+1 || got.Err != err {
		t.Fatalf("garbled: err %v, %d attempts served, observation %+v", err, n.Load(), got)
	}
}

func TestOnDoneNoResponse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, ob, o := observed(t, "retriever", "http://"+addr)
	err = c.Do(context.Background(), http.MethodPost, "/retrieve", map[string]int{}, nil)
	got := ob.only(t)
	if err == nil || got.Status != 0 || got.Attempts != o.Retries+1 || got.Err != err || got.Path != "/retrieve" || got.Role != "retriever" {
		t.Fatalf("err %v, observation %+v", err, got)
	}

	// A request that cannot even be built is observed with no attempt.
	err = c.Do(context.Background(), http.MethodPost, "/x", map[string]any{"f": func() {}}, nil)
	got = ob.only(t)
	if err == nil || got.Attempts != 0 || got.Status != 0 || !errors.Is(got.Err, err) {
		t.Fatalf("unencodable body: err %v, observation %+v", err, got)
	}
}

// Bodies go out whole, with a Content-Length (not chunked), on every
// attempt, whatever their size against the connection's write buffer; a
// POST without a body says Content-Length 0.
func TestBodyFraming(t *testing.T) {
	s := fake.New(t)
	type seen struct {
		length int64
		te     []string
		n      int
	}
	var mu sync.Mutex
	var seenSoFar []seen
	// take returns what the handler saw since the last take.
	take := func() []seen {
		mu.Lock()
		defer mu.Unlock()
		out := seenSoFar
		seenSoFar = nil
		return out
	}
	s.Handle("/x", func(w http.ResponseWriter, r *http.Request, body []byte) {
		mu.Lock()
		seenSoFar = append(seenSoFar, seen{r.ContentLength, r.TransferEncoding, len(body)})
		mu.Unlock()
		w.WriteHeader(204)
	})
	c := newClient(t, testOptions("policy", s.URL))
	big := []byte(`"` + strings.Repeat("x", 3*writeBufferSize) + `"`)
	for _, body := range [][]byte{[]byte(`{"a":1}`), big} {
		s.FailNext("/x", 1, 503, nil, "")
		if err := c.Do(context.Background(), http.MethodPost, "/x", jsonRaw(body), nil); err != nil {
			t.Fatal(err)
		}
		reqs := s.Requests("/x")
		for _, r := range reqs[len(reqs)-2:] {
			if string(r.Body) != string(body) {
				t.Fatalf("body of %d bytes arrived as %d bytes", len(body), len(r.Body))
			}
		}
		if got := take(); len(got) != 1 || got[0].length != int64(len(body)) || got[0].te != nil || got[0].n != len(body) {
			t.Fatalf("%d-byte body: %+v", len(body), got)
		}
	}
	if err := c.Do(context.Background(), http.MethodPost, "/x", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := take(); len(got) != 1 || got[0].length != 0 || got[0].te != nil {
		t.Fatalf("no body: %+v", got)
	}
}

func jsonRaw(b []byte) json.RawMessage { return json.RawMessage(b) }
