package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// h1Transport is the http.RoundTripper under the retry layer. A plain
// http:// request that goes to its server directly (no proxy) is written
// and answered on the calling goroutine over a pooled HTTP/1.1 keep-alive
// connection; everything else (https, proxied requests) goes to net/http's
// Transport. net/http runs a reader and a writer goroutine per connection
// and hands every exchange between them and the caller over channels; for
// the thousands of small loopback calls of a rollout (a policy turn, a
// tokenization, a search) those hand-offs and the wake-ups they cause cost
// more CPU than the exchange itself.
//
// Contract, as net/http's: at most max requests in flight per server (more
// wait for a free one, or for their context), at most max idle connections
// kept per server, each for at most idleTimeout; every attempt is bounded
// by timeout (zero: none) and by its context; a connection the server
// closed while it was idle is noticed before it is used (or, in the race
// where the server closes it as the request goes out, the request is sent
// once more on a new connection, which only happens before any answer
// byte arrived, and is counted for StatusError.Attempts when the request
// had been written in full). A RetryUnsent call always goes on a new
// connection, so it is never sent twice this way.
type h1Transport struct {
	std         *http.Transport
	proxy       func(*http.Request) (*url.URL, error)
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout     time.Duration
	max         int
	idleTimeout time.Duration
	peekAfter   time.Duration // see defaultPeekAfter
	allStd      bool          // every request through std (Options.NetHTTP)

	mu    sync.Mutex
	hosts map[string]*h1Host
}

// h1Host is the connections to one server.
type h1Host struct {
	addr   string        // host:port
	slots  chan struct{} // one per request in flight
	direct atomic.Int32  // 0 not yet known, 1 direct, 2 through a proxy

	mu   sync.Mutex
	idle []*h1Conn // most recently used last
}

// h1Conn is one keep-alive connection.
type h1Conn struct {
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
}

// defaultPeekAfter is how long a connection may sit idle before it is checked for
// a close by the server before reuse. Servers keep idle connections open
// for seconds (uvicorn, under vLLM and SGLang, for 5 s), so one used within
// the last second is taken as open; a server that restarted meanwhile is
// handled by sending the request again on a new connection.
const defaultPeekAfter = time.Second

// aLongTimeAgo is a deadline in the past: it fails pending reads and writes
// at once.
var aLongTimeAgo = time.Unix(1, 0)

// attemptTimeoutError is an attempt that ran past the per-attempt timeout.
type attemptTimeoutError struct{ d time.Duration }

func (e *attemptTimeoutError) Error() string {
	return fmt.Sprintf("no complete answer within %s (timeout per attempt)", e.d)
}

// Is makes errors.Is(err, context.DeadlineExceeded) hold, as for the
// call's own deadline.
func (e *attemptTimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true: the retry layer treats it as transient.
func (e *attemptTimeoutError) Timeout() bool { return true }

// Temporary reports true (net.Error).
func (e *attemptTimeoutError) Temporary() bool { return true }

// RoundTrip sends req and returns its answer, whose body must be read to
// EOF or closed (at EOF the connection goes back to the pool).
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.allStd || req.URL.Scheme != "http" {
		return t.viaStd(req)
	}
	h := t.host(req.URL)
	if !t.isDirect(h, req) {
		return t.viaStd(req)
	}
	return t.roundTrip(h, req)
}

// viaStd sends req through net/http's Transport with the per-attempt
// timeout as a context deadline.
func (t *h1Transport) viaStd(req *http.Request) (*http.Response, error) {
	if t.timeout <= 0 {
		return t.std.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.timeout)
	resp, err := t.std.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		if ctx.Err() == context.DeadlineExceeded && req.Context().Err() == nil {
			return nil, &attemptTimeoutError{t.timeout}
		}
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelBody releases a context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// host returns the pool of u's host:port.
func (t *h1Transport) host(u *url.URL) *h1Host {
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hosts[addr]
	if h == nil {
		if t.hosts == nil {
			t.hosts = map[string]*h1Host{}
		}
		h = &h1Host{addr: addr, slots: make(chan struct{}, t.max)}
		t.hosts[addr] = h
	}
	return h
}

// isDirect reports whether requests to h go without a proxy (decided once
// per host: the environment is read once by net/http too).
func (t *h1Transport) isDirect(h *h1Host, req *http.Request) bool {
	switch h.direct.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	direct := true
	if t.proxy != nil {
		if p, err := t.proxy(req); err != nil || p != nil {
			direct = false
		}
	}
	if direct {
		h.direct.Store(1)
	} else {
		h.direct.Store(2)
	}
	return direct
}

// roundTrip makes the exchange on the calling goroutine.
func (t *h1Transport) roundTrip(h *h1Host, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// Wait for a free slot (the pool's bound on requests in flight).
	select {
	case h.slots <- struct{}{}:
	default:
		select {
		case h.slots <- struct{}{}:
		case <-ctx.Done():
			closeBody(req)
			return nil, ctx.Err()
		}
	}
	body, err := requestBody(req)
	if err != nil {
		<-h.slots
		return nil, err
	}
	// A call that must not reach the server twice goes on a new
	// connection: an idle one the server is closing could fail it after
	// the write, when it could not be told from a lost answer.
	cl := callOf(ctx)
	for fresh := cl != nil && cl.retry == RetryUnsent; ; fresh = true {
		c, reused, err := t.conn(ctx, h, fresh)
		if err != nil {
			<-h.slots
			return nil, err
		}
		resp, err := t.exchange(ctx, h, c, req, body)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		var rerr *resendError
		if errors.As(err, &rerr) && reused && !fresh {
			// The server closed a kept-alive connection as the request
			// went out: nothing was answered, so send it again on a new
			// connection (never a RetryUnsent call's: it is on a new
			// connection already). A resend after a full write is counted:
			// the server may have read the first one and acted.
			if rerr.written && cl != nil {
				cl.resent++
			}
			continue
		}
		<-h.slots
		if errors.As(err, &rerr) {
			err = rerr.err
		}
		return nil, err
	}
}

// requestBody returns req's body as one slice, to be written as it is: for
// a call of Do, the call's encoded body itself (the reader the retry layer
// hands down is a view of it), else the body read whole.
func requestBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	if cl := callOf(req.Context()); cl != nil && cl.body != nil && req.ContentLength == int64(len(cl.body)) {
		return cl.body, nil
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return b, nil
}

// conn returns an idle connection to h that is still open (reused true) or
// dials a new one (always when fresh).
func (t *h1Transport) conn(ctx context.Context, h *h1Host, fresh bool) (*h1Conn, bool, error) {
	if !fresh {
		now := time.Now()
		for {
			h.mu.Lock()
			n := len(h.idle)
			if n == 0 {
				h.mu.Unlock()
				break
			}
			c := h.idle[n-1]
			h.idle[n-1] = nil
			h.idle = h.idle[:n-1]
			h.mu.Unlock()
			idle := now.Sub(c.idleAt)
			if idle > t.idleTimeout || (idle > t.peekAfter && !stillOpen(c)) {
				c.nc.Close()
				continue
			}
			return c, true, nil
		}
	}
	nc, err := t.dial(ctx, "tcp", h.addr)
	if err != nil {
		return nil, false, err
	}
	return &h1Conn{nc: nc, br: bufio.NewReaderSize(nc, readBufferSize), bw: bufio.NewWriterSize(nc, writeBufferSize)}, false, nil
}

// stillOpen reports whether the server has not closed c (nor sent anything
// unasked) while it was idle.
func stillOpen(c *h1Conn) bool {
	if c.br.Buffered() > 0 {
		return false
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return true
	}
	return peekOpen(sc)
}

// resendError is a failure on a reused connection before any byte of the
// answer came back: the request may be sent again on a new connection.
// written says the request had been written in full (the server may have
// read it).
type resendError struct {
	err     error
	written bool
}

func (e *resendError) Error() string { return e.err.Error() }
func (e *resendError) Unwrap() error { return e.err }

// exchange writes req on c and reads the answer's header; the answer's body
// is read by the caller through an h1Body, which returns c to h at EOF.
func (t *h1Transport) exchange(ctx context.Context, h *h1Host, c *h1Conn, req *http.Request, body []byte) (*http.Response, error) {
	if t.timeout > 0 {
		c.nc.SetDeadline(time.Now().Add(t.timeout))
	}
	var canceled atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		canceled.Store(true)
		c.nc.SetDeadline(aLongTimeAgo)
	})
	fail := func(err error, resend, written bool) (*http.Response, error) {
		stop()
		if canceled.Load() {
			return nil, ctx.Err()
		}
		var ne net.Error
		if t.timeout > 0 && errors.As(err, &ne) && ne.Timeout() {
			return nil, &attemptTimeoutError{t.timeout}
		}
		if resend {
			return nil, &resendError{err: err, written: written}
		}
		return nil, err
	}
	if err := writeRequest(c.bw, req, body); err != nil {
		return fail(err, !errors.Is(err, errBadHeader), false)
	}
	// Nothing came back yet: a connection the server closed fails here.
	if _, err := c.br.Peek(1); err != nil {
		return fail(err, true, true)
	}
	resp, err := http.ReadResponse(c.br, req)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		// An interim answer (100 Continue, 103 Early Hints): the final
		// one follows.
		resp, err = http.ReadResponse(c.br, req)
	}
	if err != nil {
		return fail(err, false, true)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body.Close()
		return fail(errors.New("unexpected 101 Switching Protocols"), false, true)
	}
	resp.Body = &h1Body{t: t, h: h, c: c, rc: resp.Body, stop: stop, canceled: &canceled, ctx: ctx,
		keep: !resp.Close && !req.Close}
	return resp, nil
}

// errBadHeader is a header that cannot be written (a line break in it).
var errBadHeader = errors.New("invalid header")

// writeRequest writes req (its body given as body) on w and flushes it.
func writeRequest(w *bufio.Writer, req *http.Request, body []byte) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	for k, vs := range req.Header {
		if badHeaderText(k) {
			return fmt.Errorf("%w name %q", errBadHeader, k)
		}
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			continue
		}
		for _, v := range vs {
			if badHeaderText(v) {
				return fmt.Errorf("%w value for %s", errBadHeader, k)
			}
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	if req.Close {
		w.WriteString("Connection: close\r\n")
	}
	if body != nil || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		var num [20]byte
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(num[:0], int64(len(body)), 10))
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(body)
	return w.Flush()
}

// badHeaderText reports a header name or value that would break the
// request's framing.
func badHeaderText(s string) bool {
	return strings.ContainsAny(s, "\r\n\x00")
}

// h1Body is an answer's body: at EOF its connection goes back to the pool
// (unless either side asked to close it); closed early, the connection is
// closed.
type h1Body struct {
	t        *h1Transport
	h        *h1Host
	c        *h1Conn
	rc       io.ReadCloser
	stop     func() bool
	canceled *atomic.Bool
	ctx      context.Context
	keep     bool
	done     bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
		return n, io.EOF
	}
	if err != nil {
		b.finish(false)
		if b.canceled.Load() {
			err = b.ctx.Err()
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() && b.t.timeout > 0 {
			err = &attemptTimeoutError{b.t.timeout}
		}
	}
	return n, err
}

func (b *h1Body) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish releases the body's connection and slot: back to the pool when
// the answer was read whole and the connection can be kept.
func (b *h1Body) finish(whole bool) {
	b.done = true
	stopped := b.stop()
	keep := whole && b.keep && stopped && b.c.br.Buffered() == 0
	if keep && b.t.timeout > 0 {
		keep = b.c.nc.SetDeadline(time.Time{}) == nil
	}
	if keep {
		b.t.putIdle(b.h, b.c)
	} else {
		b.c.nc.Close()
	}
	<-b.h.slots
}

// putIdle keeps c for reuse, or closes it when the pool is full.
func (t *h1Transport) putIdle(h *h1Host, c *h1Conn) {
	c.idleAt = time.Now()
	h.mu.Lock()
	if len(h.idle) >= t.max {
		h.mu.Unlock()
		c.nc.Close()
		return
	}
	h.idle = append(h.idle, c)
	h.mu.Unlock()
}

// CloseIdleConnections closes every idle connection (both paths).
func (t *h1Transport) CloseIdleConnections() {
	t.std.CloseIdleConnections()
	t.mu.Lock()
	hosts := make([]*h1Host, 0, len(t.hosts))
	for _, h := range t.hosts {
		hosts = append(hosts, h)
	}
	t.mu.Unlock()
	for _, h := range hosts {
		h.mu.Lock()
		idle := h.idle
		h.idle = nil
		h.mu.Unlock()
		for _, c := range idle {
			c.nc.Close()
		}
	}
}

// closeBody closes req's body, as a RoundTripper must even when it fails.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
