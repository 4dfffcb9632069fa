package transport

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hindsearch/hindsearch/clients/internal/fake"
)

// A RetryUnsent call is not sent again after a failure that may follow the
// server's work (a lost answer, a 503, an attempt timeout), while a default
// call is.
func TestRetryUnsentSendsOnce(t *testing.T) {
	var lost atomic.Bool
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		if _, err := s.read(br); err != nil {
			return
		}
		if lost.Load() {
			return // handled, then the connection closes unanswered
		}
		io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
	})
	o := testOptions("trainer", s.URL)
	o.Retries = 3
	c := newClient(t, o)
	read := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := len(s.requests)
		s.requests = nil
		return n
	}
	for _, kind := range []string{"503", "lost"} {
		lost.Store(kind == "lost")
		read()
		err := c.DoCall(context.Background(), Call{Retry: RetryUnsent}, http.MethodPost, "/create", json.RawMessage(`{}`), nil)
		if err == nil {
			t.Fatalf("%s: no error", kind)
		}
		if n := read(); n != 1 {
			t.Errorf("%s with RetryUnsent: the server read %d requests, want 1", kind, n)
		}
		if err := c.Do(context.Background(), http.MethodPost, "/create", json.RawMessage(`{}`), nil); err == nil {
			t.Fatalf("%s: no error", kind)
		}
		if n := read(); n != o.Retries+1 {
			t.Errorf("%s with the default: the server read %d requests, want %d", kind, n, o.Retries+1)
		}
	}
}

// A RetryUnsent call is retried when the server certainly did not get it:
// the connection was refused.
func TestRetryUnsentRetriesConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	o := testOptions("trainer", "http://"+addr)
	var attempts int
	o.OnDone = func(ob Observation) { attempts = ob.Attempts }
	c := newClient(t, o)
	err = c.DoCall(context.Background(), Call{Retry: RetryUnsent}, http.MethodPost, "/create", map[string]int{}, nil)
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err %v", err)
	}
	if attempts != o.Retries+1 {
		t.Fatalf("%d attempts, want %d", attempts, o.Retries+1)
	}
}

// A 2xx answer that does not decode is not asked again with RetryUnsent:
// the server did the work.
func TestRetryUnsentMalformedAnswerNotRetried(t *testing.T) {
	s := fake.New(t)
	s.Handle("/create", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"model_id": "cut sho`))
	})
	c := newClient(t, testOptions("trainer", s.URL))
	var out map[string]any
	if err := c.DoCall(context.Background(), Call{Retry: RetryUnsent}, http.MethodPost, "/create", map[string]int{}, &out); err == nil {
		t.Fatal("no error")
	}
	if n := len(s.Requests("/create")); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// A RetryUnsent call goes on a new connection and is not sent again when
// the server reads it and closes the connection unanswered. A default call
// on a kept-alive connection that fails so is sent again on a new one, and
// its StatusError counts both sends.
func TestStatusErrorCountsAnEarlierSend(t *testing.T) {
	var n atomic.Int32
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		for {
			r, err := s.read(br)
			if err != nil {
				return
			}
			switch {
			case strings.HasPrefix(string(r.head), "GET /warm"):
				io.WriteString(c, answer(`{}`)) // keep-alive
			case n.Add(1) == 1:
				return // the work is done, the answer lost
			default:
				io.WriteString(c, "HTTP/1.1 409 Conflict\r\nContent-Length: 16\r\n\r\n{\"detail\":\"dup\"}")
			}
		}
	})
	o := testOptions("trainer", s.URL)
	o.Retries = 0
	c := newClient(t, o)
	warm := func() {
		if err := c.Do(context.Background(), http.MethodGet, "/warm", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	warm()
	err := c.DoCall(context.Background(), Call{Retry: RetryUnsent}, http.MethodPost, "/save", json.RawMessage(`{}`), nil)
	var se *StatusError
	if err == nil || errors.As(err, &se) {
		t.Fatalf("RetryUnsent: %v, want the lost answer's error", err)
	}
	if got := n.Load(); got != 1 {
		t.Fatalf("RetryUnsent: the server got %d requests, want 1", got)
	}
	n.Store(0)
	warm()
	err = c.Do(context.Background(), http.MethodPost, "/save", json.RawMessage(`{}`), nil)
	if !errors.As(err, &se) || se.Status != http.StatusConflict {
		t.Fatalf("default: %v, want the 409", err)
	}
	if se.Attempts != 2 {
		t.Fatalf("StatusError.Attempts %d, want 2 (the lost send and the resend)", se.Attempts)
	}
}

// RetryPoll hands a 408 (a long poll the server held to its end) back to
// the caller after one attempt, and still retries what RetryTransient does
// (here a 503).
func TestRetryPollReturns408AtOnce(t *testing.T) {
	var status atomic.Int32
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := s.read(br); err != nil {
				return
			}
			if status.Load() == 408 {
				io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 2\r\n\r\n{}")
			} else {
				io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")
			}
		}
	})
	o := testOptions("trainer", s.URL)
	o.Retries = 3
	c := newClient(t, o)
	count := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := len(s.requests)
		s.requests = nil
		return n
	}
	for _, tc := range []struct {
		status int32
		want   int
	}{{408, 1}, {503, 4}} {
		status.Store(tc.status)
		count()
		err := c.DoCall(context.Background(), Call{Retry: RetryPoll}, http.MethodPost, "/api/v1/retrieve_future", json.RawMessage(`{}`), nil)
		var se *StatusError
		if !errors.As(err, &se) || se.Status != int(tc.status) {
			t.Fatalf("%d: err %v", tc.status, err)
		}
		if n := count(); n != tc.want {
			t.Errorf("%d with RetryPoll: %d attempts, want %d", tc.status, n, tc.want)
		}
	}
}
