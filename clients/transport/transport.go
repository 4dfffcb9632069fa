// Package transport is the one HTTP layer shared by every role client
// (policy, judge, retriever, trainer): resty for requests and JSON over
// exactly one retry layer, go-retryablehttp, with an explicit connection
// pool, bounded retries with exponential backoff and jitter that honour
// Retry-After, and per-call deadlines (DESIGN.md §5). A request body is
// encoded once and handed to every attempt as it is (neither layer copies
// it); answers are read into reused buffers and decoded from there.
package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-resty/resty/v2"
	"github.com/hashicorp/go-retryablehttp"
)

// Defaults used by DefaultOptions.
const (
	// DefaultTimeout is the per-attempt timeout of most roles.
	DefaultTimeout = 120 * time.Second
	// DefaultPolicyTimeout is the per-attempt timeout of the policy role,
	// whose completions can queue behind a large batch.
	DefaultPolicyTimeout = 300 * time.Second
	// DefaultTrainerTimeout is the per-attempt timeout of the trainer role:
	// SkyRL holds a retrieve_future poll for up to 300 s before it answers.
	DefaultTrainerTimeout = 330 * time.Second
	// DefaultRetries is the number of retries after the first attempt.
	DefaultRetries = 3
	// DefaultRetryWaitMin is the first backoff.
	DefaultRetryWaitMin = 50 * time.Millisecond
	// DefaultRetryWaitMax caps the exponential backoff.
	DefaultRetryWaitMax = 2 * time.Second
	// DefaultPoolSize is the connection pool size per client.
	DefaultPoolSize = 64
	// maxErrorBody is how much of a non-2xx body a StatusError keeps.
	maxErrorBody = 512
	// writeBufferSize and readBufferSize are each connection's buffers
	// (net/http's default is 4 KB): a prompt of 2,000 token ids is about
	// 14 KB of JSON, a 100-token completion answer with logprobs about
	// 8 KB.
	writeBufferSize = 16 << 10
	readBufferSize  = 8 << 10
)

// Options configure one Client.
type Options struct {
	// Role names the server's role ("policy", "judge", ...) in errors.
	Role string
	// BaseURL is the server's base URL (http or https, host present); paths
	// are appended to it.
	BaseURL string
	// Timeout bounds each attempt. The whole call, retries included, is
	// bounded by Timeout*(Retries+1) unless the caller's context ends first.
	// Zero means no timeout.
	Timeout time.Duration
	// Retries is the number of retries after the first attempt.
	Retries int
	// RetryWaitMin and RetryWaitMax bound the exponential backoff between
	// attempts; a Retry-After header overrides it.
	RetryWaitMin, RetryWaitMax time.Duration
	// PoolSize is the connection pool size: the most connections, idle or
	// busy, kept to the server.
	PoolSize int
	// Headers are sent with every request (e.g. Authorization). Their
	// values are secrets: they never appear in errors or logs.
	Headers map[string]string
	// OnRetry, when set, is called before every retry with the number of
	// the attempt about to be made (2 for the first retry) and the status
	// of the failed attempt (0 for a connection error). For metrics.
	OnRetry func(role string, attempt int, status int)
	// OnDone, when set, is called once per call (after its last attempt,
	// before Do returns) with what the call did: for per-call metrics such
	// as request counts, latencies and error rates. It runs on the caller's
	// goroutine, so it must be quick and safe for concurrent use.
	OnDone func(Observation)
	// Logger, when set, receives the retry layer's debug and error logs.
	// Nil keeps the retry layer silent.
	Logger *slog.Logger
}

// Observation describes one finished call of Do, for OnDone.
type Observation struct {
	// Role is the client's role ("policy", "judge", ...).
	Role string
	// Method is the HTTP method.
	Method string
	// Path is the request path without the base URL and without any query
	// string, e.g. "/v1/completions".
	Path string
	// Status is the final HTTP status, 0 when no response came back.
	Status int
	// Attempts is the number of HTTP requests the call sent (1 when the
	// first one settled it; 0 when none could be sent).
	Attempts int
	// Duration is the whole call, retries and backoff included.
	Duration time.Duration
	// Err is the error Do returns, nil on success.
	Err error
}

// DefaultOptions returns the defaults for role at baseURL: a timeout per
// attempt that suits the role, 3 retries, backoff between 50 ms and 2 s and
// a pool of 64 connections.
func DefaultOptions(role, baseURL string) Options {
	timeout := DefaultTimeout
	switch role {
	case "policy":
		timeout = DefaultPolicyTimeout
	case "trainer":
		timeout = DefaultTrainerTimeout
	}
	return Options{
		Role:         role,
		BaseURL:      baseURL,
		Timeout:      timeout,
		Retries:      DefaultRetries,
		RetryWaitMin: DefaultRetryWaitMin,
		RetryWaitMax: DefaultRetryWaitMax,
		PoolSize:     DefaultPoolSize,
	}
}

// Client is a JSON HTTP client of one server. It is safe for concurrent use.
type Client struct {
	role    string
	base    string // without trailing slash
	shown   string // base with any password redacted
	opts    Options
	rc      *resty.Client
	tr      *http.Transport
	at      *attemptTransport
	secrets []string
}

// Retry selects which failed attempts of one call are sent again.
type Retry int

const (
	// RetryTransient, the default, sends a call again after connection
	// errors, attempts that time out or lose their connection, 408, 429,
	// 5xx answers other than 501, and 2xx answers that do not decode: for
	// calls that are safe to repeat.
	RetryTransient Retry = iota
	// RetryUnsent sends a call again only after a failure that left the
	// request certainly unseen by the server: the connection could not be
	// made (refused, dial failure), or a kept-alive connection failed
	// before the request was written in full. Every other failure, after
	// which the server may have acted on the request, comes back to the
	// caller at once: for calls that are not idempotent (a Tinker
	// create_model makes a new model each time it arrives).
	RetryUnsent
	// RetryPoll is RetryTransient for a long poll: a 408 comes back to the
	// caller at once instead of being sent again after a backoff, since it
	// means the server held the poll for as long as it would and the
	// caller should simply poll again (SkyRL's retrieve_future holds each
	// poll, then answers 408).
	RetryPoll
	// RetryBackpressure is RetryTransient except that a 429 comes back to
	// the caller at once: for a call whose caller backs off as the server's
	// own client does (the Tinker SDK's asample: every sampling call of the
	// process waits out one shared pause after a 429, then sends again).
	RetryBackpressure
)

// Call holds the options of one call of DoCall.
type Call struct {
	// Retry selects the failures that are retried (zero: RetryTransient).
	Retry Retry
	// NoRedirect returns a 3xx answer as it is (a *StatusError) instead
	// of following it: for a route whose redirect leads to a download the
	// caller does not want (a Tinker checkpoint's archive route answers
	// 302 to its download once the checkpoint is complete).
	NoRedirect bool
	// Headers are sent with this call only, beside Options.Headers.
	Headers map[string]string
}

// call is the state of one Do call, carried to the retry layer in the
// request context: the encoded body, handed to the retry layer as it is so
// that no layer copies it, the retry policy, the attempts made, and the
// requests sent again on a new connection after their first connection
// failed once they were written (the server may have seen them).
type call struct {
	body       []byte
	retry      Retry
	noRedirect bool
	headers    map[string]string
	attempts   int
	resent     int
}

type callKey struct{}

// callOf returns the call state in ctx, nil outside Do.
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// StatusError is a non-2xx answer from a server.
type StatusError struct {
	// Role is the server's role.
	Role string
	// URL is the full URL of the request.
	URL string
	// Status is the HTTP status code.
	Status int
	// Body is the start of the response body (at most 512 bytes).
	Body string
	// Attempts is the number of requests the call sent, this one
	// included: more than 1 means an earlier one may have reached the
	// server (and acted, if the call is not idempotent) before its answer
	// was lost.
	Attempts int
	// Header is the answer's header.
	Header http.Header
}

// Error returns e.g. "judge http://127.0.0.1:1234/v1/chat/completions:
// status 503: <body start>".
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s %s: status %d", e.Role, e.URL, e.Status)
	if b := strings.TrimSpace(e.Body); b != "" {
		msg += ": " + b
	}
	return msg
}

// IsStatus reports whether err is, or wraps, a StatusError with one of the
// given statuses.
func IsStatus(err error, statuses ...int) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	for _, s := range statuses {
		if se.Status == s {
			return true
		}
	}
	return false
}

// New validates o and builds a Client.
func New(o Options) (*Client, error) {
	if o.Role == "" {
		o.Role = "server"
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: invalid base url %q: want http(s)://host[:port][/path]", o.Role, redactRaw(o.BaseURL))
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("%s %s: negative timeout", o.Role, u.Redacted())
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	if o.RetryWaitMin <= 0 {
		o.RetryWaitMin = DefaultRetryWaitMin
	}
	if o.RetryWaitMax < o.RetryWaitMin {
		o.RetryWaitMax = max(DefaultRetryWaitMax, o.RetryWaitMin)
	}
	if o.PoolSize <= 0 {
		o.PoolSize = DefaultPoolSize
	}
	c := &Client{
		role: o.Role,
		base: strings.TrimRight(u.String(), "/"),
		opts: o,
	}
	c.shown = strings.TrimRight(u.Redacted(), "/")
	for _, v := range o.Headers {
		c.addSecret(v)
		if i := strings.LastIndexByte(v, ' '); i >= 0 {
			c.addSecret(v[i+1:])
		}
	}
	if p, ok := u.User.Password(); ok {
		c.addSecret(p)
	}

	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	c.tr = &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          o.PoolSize,
		MaxIdleConnsPerHost:   o.PoolSize,
		MaxConnsPerHost:       o.PoolSize,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// A policy request (a prompt of thousands of token ids) goes out
		// in one write instead of 4 KB pieces, and most answers come in
		// with one read: fewer system calls per call, for 24 KB of
		// buffers per connection.
		WriteBufferSize: writeBufferSize,
		ReadBufferSize:  readBufferSize,
	}
	// RetryUnsent calls (rare: trainer calls that must not run twice) go
	// on connections of their own, each new (attemptTransport).
	fresh := c.tr.Clone()
	fresh.DisableKeepAlives = true
	c.at = &attemptTransport{std: c.tr, fresh: fresh, timeout: o.Timeout}
	rc := &retryablehttp.Client{
		HTTPClient:   &http.Client{Transport: c.at, CheckRedirect: checkRedirect},
		RetryWaitMin: o.RetryWaitMin,
		RetryWaitMax: o.RetryWaitMax,
		RetryMax:     o.Retries,
		CheckRetry:   checkRetry,
		Backoff:      c.backoff,
		ErrorHandler: errorHandler,
	}
	if o.Logger != nil {
		rc.Logger = o.Logger
	}
	// resty sends through the retry layer (retryRoundTripper, which plays
	// the part of retryablehttp.StandardClient's round tripper); the
	// headers of every request are set once here.
	c.rc = resty.NewWithClient(&http.Client{Transport: &retryRoundTripper{rc: rc}, CheckRedirect: checkRedirect}).
		SetRetryCount(0).
		SetLogger(silent{}).
		SetHeader("Accept", "application/json").
		SetHeaders(o.Headers)
	return c, nil
}

// checkRedirect is net/http's default redirect rule (at most 10), except
// for a call made with Call.NoRedirect, whose 3xx answer is returned.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if cl := callOf(req.Context()); cl != nil && cl.noRedirect {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

func (c *Client) addSecret(s string) {
	if len(s) >= 4 {
		c.secrets = append(c.secrets, s)
	}
}

// BaseURL returns the server's base URL, without a trailing slash and with
// any password redacted.
func (c *Client) BaseURL() string { return c.shown }

// Role returns the role named in errors.
func (c *Client) Role() string { return c.role }

// Retries returns the number of retries after a call's first attempt.
func (c *Client) Retries() int { return c.opts.Retries }

// Backoff returns the wait before retry number attempt+1 (attempt counts
// from 0), with the retry layer's bounds and jitter: for callers that
// repeat a call themselves after checking the server's state.
func (c *Client) Backoff(attempt int) time.Duration {
	return jitterBackoff(c.opts.RetryWaitMin, c.opts.RetryWaitMax, attempt)
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.at.CloseIdleConnections() }

// Do sends a request to path (appended to the base URL) and decodes the
// answer. in is sent as JSON (nil: no body; a json.RawMessage is sent
// verbatim); a 2xx answer is decoded as JSON into out (nil: discarded;
// *[]byte or *string: the raw body; a Decoder decodes it itself). A
// non-2xx answer, after retries, is a *StatusError; other failures name
// the role and the URL. Options.OnDone, when set, observes the call.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.DoCall(ctx, Call{}, method, path, in, out)
}

// DoCall is Do with per-call options: opt.Retry chooses which failures the
// retry layer sends again (RetryUnsent for a call that must not reach the
// server twice).
func (c *Client) DoCall(ctx context.Context, opt Call, method, path string, in, out any) error {
	var start time.Time
	if c.opts.OnDone != nil {
		start = time.Now()
	}
	cl := &call{retry: opt.Retry, noRedirect: opt.NoRedirect, headers: opt.Headers}
	status, err := c.do(ctx, cl, method, path, in, out)
	if c.opts.OnDone != nil {
		p, _, _ := strings.Cut(path, "?")
		c.opts.OnDone(Observation{Role: c.role, Method: method, Path: p, Status: status,
			Attempts: cl.attempts, Duration: time.Since(start), Err: err})
	}
	return err
}

// do is Do without the observation; it returns the final HTTP status too.
func (c *Client) do(ctx context.Context, cl *call, method, path string, in, out any) (int, error) {
	full := c.base + path
	shown := shownURL{c.shown, path}
	parent := ctx
	if c.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout*time.Duration(c.opts.Retries+1))
		defer cancel()
	}
	if in != nil {
		// A json.RawMessage is sent as it is: callers on hot paths encode
		// their bodies themselves.
		b, ok := in.(json.RawMessage)
		if !ok {
			var err error
			if b, err = json.Marshal(in); err != nil {
				return 0, fmt.Errorf("%s %s: encode request: %w", c.role, shown, err)
			}
		}
		cl.body = b
	}
	ctx = context.WithValue(ctx, callKey{}, cl)
	for attempt := 0; ; attempt++ {
		status, err := c.once(ctx, cl, method, full, shown, out)
		if err != nil && parent.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// The call's own deadline (every attempt's timeout), not the
			// caller's: say so.
			return status, fmt.Errorf("%s %s: no complete answer within %s (%d attempts, at most %s each): %w",
				c.role, shown, c.opts.Timeout*time.Duration(c.opts.Retries+1), max(cl.attempts, 1), c.opts.Timeout, context.DeadlineExceeded)
		}
		if err == nil || !isDecodeError(err) || attempt >= c.opts.Retries || ctx.Err() != nil || cl.retry == RetryUnsent {
			return status, err
		}
		// A 2xx answer that does not decode (cut short, garbled) is
		// transient too: ask again after a backoff.
		if c.opts.OnRetry != nil {
			c.opts.OnRetry(c.role, cl.attempts+1, 0)
		}
		select {
		case <-time.After(jitterBackoff(c.opts.RetryWaitMin, c.opts.RetryWaitMax, attempt)):
		case <-ctx.Done():
			return status, err
		}
	}
}

// Decoder is an out value of Do that decodes a 2xx body itself (a fast
// path for a hot answer); its failure counts as a malformed answer and is
// retried like one. body is only valid during the call: the transport
// reuses its memory afterwards, so DecodeJSON must copy what it keeps.
type Decoder interface {
	DecodeJSON(body []byte) error
}

// decodeError is a 2xx answer whose body could not be decoded.
type decodeError struct{ msg string }

func (e *decodeError) Error() string { return e.msg }

func isDecodeError(err error) bool {
	var de *decodeError
	return errors.As(err, &de)
}

// shownURL is the URL named in errors (base with any password redacted,
// then the path), joined only when an error needs it.
type shownURL struct{ base, path string }

func (u shownURL) String() string { return u.base + u.path }

var (
	contentType     = http.CanonicalHeaderKey("Content-Type")
	jsonContentType = []string{"application/json"}
)

// bodyPool holds response buffers: answers are read into one and decoded
// from it, instead of into a new slice each.
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody bounds the buffers kept in bodyPool.
const maxPooledBody = 1 << 20

// once makes one call through the retry layer and decodes its answer; it
// returns the answer's status (0 without one).
func (c *Client) once(ctx context.Context, cl *call, method, full string, shown shownURL, out any) (int, error) {
	req := c.rc.R().SetContext(ctx).SetDoNotParseResponse(true)
	if cl.headers != nil {
		req.SetHeaders(cl.headers)
	}
	if cl.body != nil {
		// resty passes an io.Reader through without buffering it, and
		// retryRoundTripper sends cl.body itself (an empty body as resty
		// made it). The header's value is shared, never modified: resty
		// sends a copy of the request's header.
		req.Header[contentType] = jsonContentType
		req.SetBody(bytes.NewReader(cl.body))
	}
	resp, err := req.Execute(method, full)
	var raw *http.Response
	if resp != nil {
		raw = resp.RawResponse
	}
	if err != nil {
		return 0, c.sendError(shown, raw, err)
	}
	st := raw.StatusCode
	bp := bodyPool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBody {
			bodyPool.Put(bp)
		}
	}()
	body, err := readBody(raw, (*bp)[:0])
	*bp = body
	if err != nil {
		return st, fmt.Errorf("%s %s: read response: %w", c.role, shown, c.redactErr(err))
	}
	if st < 200 || st > 299 {
		return st, c.statusError(cl, shown, raw, body)
	}
	switch o := out.(type) {
	case nil:
		return st, nil
	case Decoder:
		if err := o.DecodeJSON(body); err != nil {
			return st, &decodeError{fmt.Sprintf("%s %s: decode response: %s", c.role, shown, c.redact(err.Error()))}
		}
		return st, nil
	case *[]byte:
		*o = append((*o)[:0], body...)
		return st, nil
	case *string:
		*o = string(body)
		return st, nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return st, &decodeError{fmt.Sprintf("%s %s: decode response: empty body", c.role, shown)}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return st, &decodeError{fmt.Sprintf("%s %s: decode response: %s", c.role, shown, c.redact(err.Error()))}
	}
	return st, nil
}

// sendError is the failure of a request that got no answer: the role,
// the URL and the cause (out of resty's *url.Error), secrets redacted. A
// response that came with it is closed.
func (c *Client) sendError(shown shownURL, raw *http.Response, err error) error {
	if raw != nil && raw.Body != nil {
		raw.Body.Close()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%s %s: %w", c.role, shown, c.redactErr(err))
}

// statusError is a non-2xx answer as a *StatusError: its status, header
// and the start of body (at most maxErrorBody bytes), redacted.
func (c *Client) statusError(cl *call, shown shownURL, raw *http.Response, body []byte) *StatusError {
	if len(body) > maxErrorBody {
		body = body[:maxErrorBody]
	}
	return &StatusError{Role: c.role, URL: shown.String(), Status: raw.StatusCode, Body: c.redact(strings.ToValidUTF8(string(body), "?")),
		Attempts: max(cl.attempts, 1) + cl.resent, Header: raw.Header}
}

// readBody reads and closes resp's body, appending to buf (grown to the
// announced length at once).
func readBody(resp *http.Response, buf []byte) ([]byte, error) {
	defer resp.Body.Close()
	if n := resp.ContentLength; n > 0 && n <= maxPooledBody && int64(cap(buf)) < n+1 {
		// One spare byte, so that the read that meets EOF needs no growth.
		buf = make([]byte, 0, n+1)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// retryRoundTripper is the round tripper of resty's http.Client: it sends
// each request through the retry layer, like retryablehttp's own
// RoundTripper, but hands it the call's encoded body as a []byte, which the
// retry layer reads afresh for every attempt without copying it (its
// RoundTripper would read the request body into a new slice first).
type retryRoundTripper struct {
	rc *retryablehttp.Client
}

func (t *retryRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var rreq *retryablehttp.Request
	if cl := callOf(req.Context()); cl != nil && len(cl.body) > 0 {
		rreq = &retryablehttp.Request{Request: req}
		if err := rreq.SetBody(cl.body); err != nil {
			return nil, err
		}
	} else {
		var err error
		if rreq, err = retryablehttp.FromRequest(req); err != nil {
			return nil, err
		}
	}
	resp, err := t.rc.Do(rreq)
	// Like retryablehttp.RoundTripper: the http.Client above wraps errors
	// in a *url.Error again.
	if ue, ok := err.(*url.Error); ok {
		return resp, ue.Err
	}
	return resp, err
}

// redact removes secrets from s.
func (c *Client) redact(s string) string {
	for _, sec := range c.secrets {
		s = strings.ReplaceAll(s, sec, "[redacted]")
	}
	return s
}

// redactErr wraps err so that its message carries no secret while errors.Is
// and errors.As still see it.
func (c *Client) redactErr(err error) error {
	msg := err.Error()
	if r := c.redact(msg); r != msg {
		return &redactedError{msg: r, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// checkRetry retries connection errors, 408, 429 and 5xx except 501, never
// after the caller's context ended, and not when a Retry-After asks for a
// wait past the call's deadline.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	// The retry layer asks once per attempt: count it for Observation.
	if cl := callOf(ctx); cl != nil {
		cl.attempts++
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if cl := callOf(ctx); cl != nil && cl.retry == RetryUnsent {
		// Only a request that never reached the server may go again.
		return err != nil && isConnectError(err), nil
	}
	if err != nil {
		// The calls sent with RetryTransient are idempotent (seeded
		// sampling, trainer calls de-duplicated by seq_id, or recognised
		// by the caller when repeated), so an attempt that timed out or
		// lost its connection is sent again while the call's own deadline
		// allows.
		return isConnectError(err) || isTransient(err), nil
	}
	if cl := callOf(ctx); cl != nil && cl.retry == RetryPoll && resp.StatusCode == http.StatusRequestTimeout {
		return false, nil
	}
	if cl := callOf(ctx); cl != nil && cl.retry == RetryBackpressure && resp.StatusCode == http.StatusTooManyRequests {
		return false, nil
	}
	switch st := resp.StatusCode; {
	case st == http.StatusRequestTimeout, st == http.StatusTooManyRequests,
		st >= 500 && st <= 599 && st != http.StatusNotImplemented:
	default:
		return false, nil
	}
	if wait, ok := retryAfter(resp); ok {
		if dl, has := ctx.Deadline(); has && time.Until(dl) < wait {
			return false, nil
		}
	}
	return true, nil
}

// isTransient reports an attempt that timed out on its own deadline or
// whose connection was reset or closed mid-exchange. A server that hangs
// up while a request body is still being written fails the write with
// ECONNRESET or EPIPE when the kernel notices first, or with
// net.ErrClosed ("use of closed network connection") when net/http's read
// loop has already closed the connection under the writer: the same
// event, so both are transient.
func isTransient(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// NotSent reports whether err, returned by Do, is a failure to connect to
// the server: the request never reached it.
func NotSent(err error) bool { return isConnectError(err) }

// isConnectError reports whether err happened while connecting, so the
// request never reached the server.
func isConnectError(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// backoff waits exponentially longer between retries, with jitter, or as
// long as a Retry-After header asks.
func (c *Client) backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	if c.opts.OnRetry != nil {
		c.opts.OnRetry(c.role, attempt+2, status)
	}
	if wait, ok := retryAfter(resp); ok {
		return wait
	}
	return jitterBackoff(lo, hi, attempt)
}

// jitterBackoff returns a wait in [d/2, d] where d = lo*2^attempt capped at
// hi.
func jitterBackoff(lo, hi time.Duration, attempt int) time.Duration {
	d := hi
	if attempt < 30 {
		if e := lo << uint(attempt); e > 0 && e < hi {
			d = e
		}
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	h := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if h == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// errorHandler runs when retries are exhausted: the last response (a
// retryable status) goes back to the caller as is, so that it becomes a
// StatusError; an error is returned bare.
func errorHandler(resp *http.Response, err error, attempts int) (*http.Response, error) {
	if err == nil && resp != nil {
		return resp, nil
	}
	if resp != nil && resp.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
	}
	if err == nil {
		err = errors.New("request failed")
	}
	if attempts > 1 {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("giving up after %d attempts: %w", attempts, err)
	}
	return nil, err
}

// redactRaw hides a password in a URL that may not parse.
func redactRaw(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
		return raw
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		if j := strings.Index(raw, "://"); j >= 0 && j < i {
			return raw[:j+3] + "[redacted]" + raw[i:]
		}
	}
	return raw
}

// silent is resty's logger: quiet (errors come back as values).
type silent struct{}

func (silent) Errorf(string, ...any) {}
func (silent) Warnf(string, ...any)  {}
func (silent) Debugf(string, ...any) {}
