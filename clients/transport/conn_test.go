package transport

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer is a loopback TCP server whose connections are handled by a
// function that reads requests and writes answers byte by byte, for the
// cases net/http's server does not produce on command. It records the
// requests it read and counts connections.
type rawServer struct {
	URL   string
	ln    net.Listener
	wg    sync.WaitGroup
	conns atomic.Int32

	mu       sync.Mutex
	requests [][]byte
	open     []net.Conn
}

// rawRequest is one request read off a connection.
type rawRequest struct {
	head []byte // request line and headers, CRLFs included
	body []byte
}

func newRawServer(t *testing.T, handle func(s *rawServer, c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{URL: "http://" + ln.Addr().String(), ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				handle(s, c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// read reads one request (Content-Length bodies only) and records it.
func (s *rawServer) read(br *bufio.Reader) (rawRequest, error) {
	var r rawRequest
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return r, err
		}
		r.head = append(r.head, line...)
		if line == "\r\n" {
			break
		}
		if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length: "); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	r.body = make([]byte, n)
	if _, err := io.ReadFull(br, r.body); err != nil {
		return r, err
	}
	s.mu.Lock()
	s.requests = append(s.requests, append(append([]byte{}, r.head...), r.body...))
	s.mu.Unlock()
	return r, nil
}

func answer(body string, extra ...string) string {
	h := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	for _, e := range extra {
		h += e + "\r\n"
	}
	return h + "\r\n" + body
}

func TestRequestOnTheWire(t *testing.T) {
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := s.read(br); err != nil {
				return
			}
			io.WriteString(c, answer(`{"ok":1}`))
		}
	})
	o := testOptions("policy", s.URL+"/base")
	o.Headers = map[string]string{"Authorization": "Bearer sk-secret-1"}
	c := newClient(t, o)
	var out struct{ OK int }
	if err := c.Do(context.Background(), http.MethodPost, "/v1/completions?x=1", json.RawMessage(`{"prompt":[1,2,3]}`), &out); err != nil {
		t.Fatal(err)
	}
	if out.OK != 1 {
		t.Fatalf("answer %+v", out)
	}
	if err := c.Do(context.Background(), http.MethodGet, "/health", nil, nil); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(s.URL, "http://")
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) != 2 {
		t.Fatalf("%d requests", len(s.requests))
	}
	post := string(s.requests[0])
	head, body, _ := strings.Cut(post, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	if lines[0] != "POST /base/v1/completions?x=1 HTTP/1.1" || lines[1] != "Host: "+host {
		t.Fatalf("request line and host: %q", lines[:2])
	}
	for _, want := range []string{"Content-Type: application/json", "Accept: application/json", "Authorization: Bearer sk-secret-1", "Content-Length: 18"} {
		if !strings.Contains(head, "\r\n"+want+"\r\n") && !strings.HasSuffix(head, "\r\n"+want) {
			t.Errorf("header %q missing in\n%s", want, head)
		}
	}
	if strings.Contains(head, "Idempotency") {
		t.Errorf("the idempotency mark went out:\n%s", head)
	}
	if body != `{"prompt":[1,2,3]}` {
		t.Errorf("body %q", body)
	}
	get := string(s.requests[1])
	if !strings.HasPrefix(get, "GET /base/health HTTP/1.1\r\n") || strings.Contains(get, "Content-Length") || !strings.HasSuffix(get, "\r\n\r\n") {
		t.Errorf("GET request %q", get)
	}
	if n := s.conns.Load(); n != 1 {
		t.Errorf("%d connections for two sequential calls, want 1 (kept alive)", n)
	}
}

func TestRejectsLineBreakInHeader(t *testing.T) {
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		s.read(br)
	})
	o := testOptions("judge", s.URL)
	o.Headers = map[string]string{"X-Bad": "a\r\nInjected: yes"}
	c := newClient(t, o)
	err := c.Do(context.Background(), http.MethodPost, "/x", json.RawMessage(`{}`), nil)
	if err == nil || !strings.Contains(err.Error(), "invalid header") || strings.Contains(err.Error(), "Injected") {
		t.Fatalf("err = %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) != 0 {
		t.Fatalf("a request with a broken header went out: %q", s.requests)
	}
}

// TestServerClosedIdleConnection: a server that closes each connection
// after answering, without saying so. The next call must notice (net/http
// sees the close on the idle connection, or sends again on a new one when
// the close comes as the request goes out) and succeed with one attempt,
// no retry.
func TestServerClosedIdleConnection(t *testing.T) {
	for _, pause := range []time.Duration{20 * time.Millisecond, 0} {
		t.Run(fmt.Sprintf("pause=%s", pause), func(t *testing.T) {
			s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
				if _, err := s.read(br); err != nil {
					return
				}
				io.WriteString(c, answer(`{"n":1}`))
			})
			var retries atomic.Int32
			var attempts []int
			var mu sync.Mutex
			o := testOptions("policy", s.URL)
			o.OnRetry = func(string, int, int) { retries.Add(1) }
			o.OnDone = func(ob Observation) {
				mu.Lock()
				attempts = append(attempts, ob.Attempts)
				mu.Unlock()
			}
			c := newClient(t, o)
			for i := range 5 {
				if i > 0 {
					time.Sleep(pause) // the server's close arrives, or not yet
				}
				if err := c.Do(context.Background(), http.MethodPost, "/x", json.RawMessage(`{}`), nil); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if retries.Load() != 0 {
				t.Errorf("%d retries by the retry layer, want 0", retries.Load())
			}
			mu.Lock()
			defer mu.Unlock()
			for i, a := range attempts {
				if a != 1 {
					t.Errorf("call %d: %d attempts", i, a)
				}
			}
			if n := s.conns.Load(); n != 5 {
				t.Errorf("%d connections, want 5", n)
			}
			if len(s.requests) != 5 {
				t.Errorf("server read %d requests, want 5", len(s.requests))
			}
		})
	}
}

func TestChunkedAndCloseAnswers(t *testing.T) {
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			r, err := s.read(br)
			if err != nil {
				return
			}
			switch string(r.body) {
			case `"chunked"`:
				io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n3\r\n42}\r\n0\r\n\r\n")
			case `"interim"`:
				io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"+answer(`{"a":7}`))
			case `"close"`:
				io.WriteString(c, answer(`{"a":9}`, "Connection: close"))
				return
			}
		}
	})
	c := newClient(t, testOptions("retriever", s.URL))
	for _, tc := range []struct {
		in   string
		want int
	}{{`"chunked"`, 42}, {`"interim"`, 7}, {`"chunked"`, 42}, {`"close"`, 9}, {`"chunked"`, 42}} {
		var out struct{ A int }
		if err := c.Do(context.Background(), http.MethodPost, "/x", json.RawMessage(tc.in), &out); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if out.A != tc.want {
			t.Fatalf("%s: got %d", tc.in, out.A)
		}
	}
	// The connection closed by "close" is the only one replaced.
	if n := s.conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

func TestPoolBoundsRequestsInFlight(t *testing.T) {
	var cur, peak atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		cur.Add(-1)
		io.WriteString(w, `{}`)
	}))
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	o := testOptions("policy", srv.URL)
	o.PoolSize = 3
	c := newClient(t, o)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for range 12 {
		wg.Go(func() { errs <- c.Do(context.Background(), http.MethodPost, "/x", json.RawMessage(`{}`), nil) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != 3 {
		t.Errorf("peak requests in flight %d, want 3 (the pool size)", p)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

func TestCancelMidAnswer(t *testing.T) {
	closed := make(chan struct{})
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		if _, err := s.read(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"a\":")
		// Wait for the client to hang up.
		if _, err := br.ReadByte(); err != nil {
			close(closed)
		}
	})
	c := newClient(t, testOptions("judge", s.URL))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	err := c.Do(ctx, http.MethodPost, "/x", json.RawMessage(`{}`), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("cancel took %s", d)
	}
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("connection of a canceled call not closed")
	}
}

func TestAttemptTimeoutIsRetried(t *testing.T) {
	var calls atomic.Int32
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := s.read(br); err != nil {
				return
			}
			if calls.Add(1) == 1 {
				// The first attempt gets no answer in time.
				br.ReadByte()
				return
			}
			io.WriteString(c, answer(`{"a":1}`))
		}
	})
	o := testOptions("retriever", s.URL)
	o.Timeout = 100 * time.Millisecond
	var retryStatus []int
	o.OnRetry = func(_ string, _ int, st int) { retryStatus = append(retryStatus, st) }
	c := newClient(t, o)
	var out struct{ A int }
	if err := c.Do(context.Background(), http.MethodPost, "/x", json.RawMessage(`{}`), &out); err != nil {
		t.Fatal(err)
	}
	if out.A != 1 || calls.Load() != 2 || len(retryStatus) != 1 {
		t.Fatalf("answer %d after %d calls, retries %v", out.A, calls.Load(), retryStatus)
	}
	o.Retries = 0
	calls.Store(0)
	c = newClient(t, o)
	err := c.Do(context.Background(), http.MethodPost, "/x", json.RawMessage(`{}`), nil)
	if err == nil || !strings.Contains(err.Error(), "no complete answer within 100ms") || !strings.Contains(err.Error(), s.URL+"/x") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

// TestProxiedRequests: a request that goes through a proxy is sent to it
// with the absolute URI.
func TestProxiedRequests(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI)
		mu.Unlock()
		io.WriteString(w, `{"via":"proxy"}`)
	}))
	t.Cleanup(proxy.Close)
	pu, _ := url.Parse(proxy.URL)
	c := newClient(t, testOptions("judge", "http://judge.invalid:8000"))
	c.tr.Proxy = http.ProxyURL(pu)
	var out struct{ Via string }
	if err := c.Do(context.Background(), http.MethodPost, "/v1/chat/completions", json.RawMessage(`{}`), &out); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if out.Via != "proxy" || len(seen) != 1 || seen[0] != "http://judge.invalid:8000/v1/chat/completions" {
		t.Fatalf("via %q, proxy saw %q", out.Via, seen)
	}
}

// TestClosedMidBodyIsRetried: a server that closes the connection while a
// large request body is still being written fails the write in one of
// several ways, depending on which side notices first (the kernel's reset
// or EPIPE, or net/http's read loop closing the connection under the
// writer: "use of closed network connection"). Each is retried for a call
// that may be repeated.
func TestClosedMidBodyIsRetried(t *testing.T) {
	var conns atomic.Int32
	s := newRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) {
		first := conns.Add(1)%2 == 1
		for {
			if first {
				// Read the head and a little of the body, then hang up.
				for {
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				br.Discard(1024)
				return
			}
			if _, err := s.read(br); err != nil {
				return
			}
			io.WriteString(c, answer(`{"a":1}`))
		}
	})
	body := json.RawMessage(`"` + strings.Repeat("x", 8<<20) + `"`)
	for i := range 20 {
		o := testOptions("trainer", s.URL)
		c := newClient(t, o)
		var out struct{ A int }
		if err := c.Do(context.Background(), http.MethodPost, "/x", body, &out); err != nil || out.A != 1 {
			t.Fatalf("call %d: answer %d, err %v", i, out.A, err)
		}
		c.Close()
	}
}

// The write error of CI's chaos run (a trainer POST whose connection was
// closed under its body) is transient.
func TestClosedConnectionWriteIsTransient(t *testing.T) {
	err := &net.OpError{Op: "readfrom", Net: "tcp", Err: &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}}
	if !isTransient(err) {
		t.Fatalf("%v not transient", err)
	}
	if isTransient(fmt.Errorf("x: %w", context.Canceled)) {
		t.Fatal("canceled is transient")
	}
}
