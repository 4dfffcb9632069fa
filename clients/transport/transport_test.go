package transport

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
)

func testOptions(role, base string) Options {
	o := DefaultOptions(role, base)
	o.Timeout = 2 * time.Second
	o.RetryWaitMin = time.Millisecond
	o.RetryWaitMax = 5 * time.Millisecond
	return o
}

func newClient(t *testing.T, o Options) *Client {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestNewValidatesBaseURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8000", "ftp://x", "http://", "http//x", "://x"} {
		_, err := New(DefaultOptions("judge", u))
		if err == nil {
			t.Fatalf("%q: want error", u)
		}
		if !strings.Contains(err.Error(), "judge") || !strings.Contains(err.Error(), u) {
			t.Errorf("%q: error does not name role and url: %v", u, err)
		}
	}
	_, err := New(DefaultOptions("judge", "http://user:hunter22@127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(DefaultOptions("judge", "ftp://user:hunter22@127.0.0.1"))
	if err == nil || strings.Contains(err.Error(), "hunter22") {
		t.Fatalf("password in error or no error: %v", err)
	}
}

func TestDoJSONAndHeaders(t *testing.T) {
	s := fake.New(t)
	s.Handle("/echo", func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	o := testOptions("policy", s.URL+"/")
	o.Headers = map[string]string{"X-API-Key": "k-secret"}
	c := newClient(t, o)
	if c.BaseURL() != s.URL {
		t.Fatalf("base %q", c.BaseURL())
	}
	var out struct {
		A int      `json:"a"`
		B []string `json:"b"`
	}
	if err := c.Do(context.Background(), http.MethodPost, "/echo", map[string]any{"a": 1, "b": []string{"x"}}, &out); err != nil {
		t.Fatal(err)
	}
	if out.A != 1 || len(out.B) != 1 || out.B[0] != "x" {
		t.Fatalf("out %+v", out)
	}
	r := s.Requests("/echo")[0]
	fake.AssertJSON(t, r.Body, `{"a":1,"b":["x"]}`)
	if r.Header.Get("X-API-Key") != "k-secret" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", r.Header)
	}
	// nil in: no body; raw out.
	var raw string
	s.Handle("/text", func(w http.ResponseWriter, _ *http.Request, _ []byte) { _, _ = w.Write([]byte("ok text")) })
	if err := c.Do(context.Background(), http.MethodGet, "/text", nil, &raw); err != nil || raw != "ok text" {
		t.Fatalf("raw %q %v", raw, err)
	}
	if len(s.Requests("/text")[0].Body) != 0 {
		t.Fatal("GET carried a body")
	}
	// non-json 2xx into a struct: decode error naming role and url.
	err := c.Do(context.Background(), http.MethodGet, "/text", nil, &out)
	if err == nil || !strings.Contains(err.Error(), "policy "+s.URL+"/text: decode response") {
		t.Fatalf("decode error: %v", err)
	}
}

func TestRetry503ThenSuccess(t *testing.T) {
	s := fake.New(t)
	s.HandleJSON("/x", 200, map[string]int{"v": 7})
	s.FailNext("/x", 2, 503, nil, "busy")
	o := testOptions("judge", s.URL)
	var mu sync.Mutex
	var retries [][2]int
	o.OnRetry = func(role string, attempt, status int) {
		mu.Lock()
		defer mu.Unlock()
		if role != "judge" {
			t.Errorf("role %q", role)
		}
		retries = append(retries, [2]int{attempt, status})
	}
	c := newClient(t, o)
	var out map[string]int
	if err := c.Do(context.Background(), http.MethodPost, "/x", map[string]int{"n": 1}, &out); err != nil {
		t.Fatal(err)
	}
	if out["v"] != 7 {
		t.Fatalf("out %v", out)
	}
	reqs := s.Requests("/x")
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, r := range reqs {
		fake.AssertJSON(t, r.Body, `{"n":1}`)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(retries) != 2 || retries[0] != [2]int{2, 503} || retries[1] != [2]int{3, 503} {
		t.Fatalf("retries %v", retries)
	}
}

func TestRetriesExhaustedGiveStatusError(t *testing.T) {
	s := fake.New(t)
	s.FailNext("/x", 10, 502, nil, "bad gateway")
	o := testOptions("retriever", s.URL)
	o.Retries = 2
	c := newClient(t, o)
	err := c.Do(context.Background(), http.MethodGet, "/x", nil, nil)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 502 || se.Body != "bad gateway" {
		t.Fatalf("err %v", err)
	}
	if n := len(s.Requests("")); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

func TestNoRetryOn400And501(t *testing.T) {
	for _, st := range []int{400, 501, 404} {
		s := fake.New(t)
		long := strings.Repeat("e", 2000)
		s.FailNext("", 5, st, nil, `{"detail":"bad `+long+`"}`)
		c := newClient(t, testOptions("judge", s.URL))
		err := c.Do(context.Background(), http.MethodPost, "/v1/chat/completions", map[string]any{}, nil)
		var se *StatusError
		if !errors.As(err, &se) {
			t.Fatalf("%d: err %T %v", st, err, err)
		}
		if se.Status != st || se.URL != s.URL+"/v1/chat/completions" || se.Role != "judge" || len(se.Body) != 512 || !strings.HasPrefix(se.Body, `{"detail":"bad e`) {
			t.Fatalf("%d: %+v", st, se)
		}
		if !strings.HasPrefix(err.Error(), "judge "+s.URL+"/v1/chat/completions: status ") {
			t.Fatalf("message %q", err.Error())
		}
		if !IsStatus(err, st) {
			t.Fatal("IsStatus")
		}
		if n := len(s.Requests("")); n != 1 {
			t.Fatalf("%d: %d requests, want 1", st, n)
		}
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	s := fake.New(t)
	s.HandleJSON("/x", 200, map[string]int{})
	s.FailNext("/x", 1, 429, map[string]string{"Retry-After": "0.3"}, "slow down")
	c := newClient(t, testOptions("judge", s.URL))
	start := time.Now()
	if err := c.Do(context.Background(), http.MethodGet, "/x", nil, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 280*time.Millisecond {
		t.Fatalf("retried after %v, want >= 300ms", d)
	}
	if n := len(s.Requests("")); n != 2 {
		t.Fatalf("%d requests", n)
	}
}

func TestRetryAfterPastDeadlineFailsFast(t *testing.T) {
	s := fake.New(t)
	s.FailNext("/x", 1, 429, map[string]string{"Retry-After": "60"}, "later")
	c := newClient(t, testOptions("judge", s.URL))
	start := time.Now()
	err := c.Do(context.Background(), http.MethodGet, "/x", nil, nil)
	if !IsStatus(err, 429) || time.Since(start) > time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

func TestJitterBackoffBounds(t *testing.T) {
	for a := range 40 {
		d := jitterBackoff(50*time.Millisecond, 2*time.Second, a)
		want := min(50*time.Millisecond<<min(a, 20), 2*time.Second)
		if d < want/2 || d > want {
			t.Fatalf("attempt %d: %v not in [%v, %v]", a, d, want/2, want)
		}
	}
}

func TestDeadlineAgainstHangingHandler(t *testing.T) {
	s := fake.New(t)
	s.Handle("/hang", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-s.Stopped():
		}
	})
	o := testOptions("policy", s.URL)
	o.Timeout = 100 * time.Millisecond
	c := newClient(t, o)
	start := time.Now()
	err := c.Do(context.Background(), http.MethodPost, "/hang", map[string]int{}, nil)
	d := time.Since(start)
	if err == nil || d > time.Second {
		t.Fatalf("err %v after %v", err, d)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "policy "+s.URL+"/hang: ") {
		t.Fatalf("err %v", err)
	}
	// A shorter caller deadline wins.
	o.Timeout = 10 * time.Second
	c2 := newClient(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = c2.Do(ctx, http.MethodPost, "/hang", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

func TestOverallDeadlineBoundsRetries(t *testing.T) {
	s := fake.New(t)
	s.Handle("/slow", func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-time.After(90 * time.Millisecond):
			w.WriteHeader(503)
		case <-r.Context().Done():
		case <-s.Stopped():
		}
	})
	o := testOptions("trainer", s.URL)
	o.Timeout = 100 * time.Millisecond // per attempt: each attempt fits
	o.Retries = 5                      // per call: 600ms, less than 6 attempts and 5 waits
	o.RetryWaitMin = 40 * time.Millisecond
	o.RetryWaitMax = 40 * time.Millisecond
	c := newClient(t, o)
	start := time.Now()
	err := c.Do(context.Background(), http.MethodGet, "/slow", nil, nil)
	d := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || d > 900*time.Millisecond {
		t.Fatalf("err %v after %v", err, d)
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	o := testOptions("retriever", "http://"+addr)
	o.Headers = map[string]string{"Authorization": "Bearer sk-very-secret"}
	var n int
	o.OnRetry = func(_ string, _ int, status int) {
		if status != 0 {
			t.Errorf("status %d", status)
		}
		n++
	}
	c := newClient(t, o)
	err = c.Do(context.Background(), http.MethodPost, "/retrieve", map[string]int{}, nil)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "retriever http://"+addr+"/retrieve: ") || !strings.Contains(msg, "refused") {
		t.Fatalf("message %q", msg)
	}
	if strings.Contains(msg, "sk-very-secret") {
		t.Fatal("secret in error")
	}
	if n != o.Retries {
		t.Fatalf("%d retries, want %d", n, o.Retries)
	}
}

func TestCancelledContextNotRetried(t *testing.T) {
	s := fake.New(t)
	s.FailNext("", 100, 503, nil, "")
	o := testOptions("judge", s.URL)
	o.RetryWaitMin = 200 * time.Millisecond
	o.RetryWaitMax = 200 * time.Millisecond
	c := newClient(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	err := c.Do(ctx, http.MethodGet, "/x", nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if n := len(s.Requests("")); n != 1 {
		t.Fatalf("%d requests", n)
	}
}

func TestSecretRedactedFromBody(t *testing.T) {
	s := fake.New(t)
	s.FailNext("", 1, 401, nil, `{"error":"bad key sk-very-secret"}`)
	o := testOptions("judge", s.URL)
	o.Headers = map[string]string{"Authorization": "Bearer sk-very-secret"}
	c := newClient(t, o)
	err := c.Do(context.Background(), http.MethodGet, "/x", nil, nil)
	if err == nil || strings.Contains(err.Error(), "sk-very-secret") {
		t.Fatalf("err %v", err)
	}
}
