package transport

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// attemptTransport is the http.RoundTripper under the retry layer: every
// attempt goes through net/http's Transport, bounded by the per-attempt
// timeout (a context deadline: an http.Client timeout would cost a
// goroutine and a timer per request), with the contracts the retry layer
// relies on:
//
//   - a RetryUnsent call always goes on a new connection (std's twin
//     without keep-alives), so that a kept-alive connection the server is
//     closing cannot fail it after the write, when the failure could not
//     be told from a lost answer;
//   - any other call is idempotent (Retry): it is marked so for net/http
//     (an X-Idempotency-Key entry without a value, which net/http does not
//     send), so that net/http sends it again on a new connection when a
//     kept-alive one turns out closed before any answer byte arrived; a
//     resend after a full write is counted in StatusError.Attempts, since
//     the server may have read the first one and acted.
type attemptTransport struct {
	std     *http.Transport // pooled keep-alive connections
	fresh   *http.Transport // std without keep-alives, for RetryUnsent
	timeout time.Duration   // per attempt; zero: none
}

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
// EOF or closed.
func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	cl := callOf(ctx)
	tr := t.std
	var writes atomic.Int32
	if cl != nil {
		if cl.retry == RetryUnsent {
			tr = t.fresh
		} else {
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
				if i.Err == nil {
					writes.Add(1)
				}
			}})
		}
	}
	var cancel context.CancelFunc = func() {}
	if t.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
	}
	r := req.WithContext(ctx)
	if cl != nil && cl.retry != RetryUnsent {
		r.Header = req.Header.Clone()
		if r.Header == nil {
			r.Header = http.Header{}
		}
		r.Header["X-Idempotency-Key"] = nil
		if r.GetBody == nil && cl.body != nil && r.ContentLength == int64(len(cl.body)) {
			body := cl.body
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
	}
	resp, err := tr.RoundTrip(r)
	if n := writes.Load(); n > 1 {
		cl.resent += int(n - 1)
	}
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

// CloseIdleConnections closes every idle connection.
func (t *attemptTransport) CloseIdleConnections() {
	t.std.CloseIdleConnections()
	t.fresh.CloseIdleConnections()
}
