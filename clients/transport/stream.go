package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Stream sends one request without a body (a HEAD or a GET of a file
// too large for Do) through the same retry layer and returns the answer
// with its body unread: the caller reads and closes it. A 2xx answer, and a
// 3xx when opt.NoRedirect asks for it, is returned; any other answer after
// retries is a *StatusError (its body's start read, the body closed).
// target is a path under the base URL, or an absolute http(s) URL (a
// redirect's Location, which may be another host: the Authorization
// header is then not sent, as net/http drops it on redirects). headers are
// sent with it. Options.OnDone observes it when the answer comes, not when
// its body has been read.
func (c *Client) Stream(ctx context.Context, opt Call, method, target string, headers map[string]string) (*http.Response, error) {
	full, shown := c.base+target, shownURL{c.shown, target}
	if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
		u, err := url.Parse(target)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", c.role, redactRaw(target), err)
		}
		full, shown = target, shownURL{u.Redacted(), ""}
	}
	cl := &call{retry: opt.Retry, noRedirect: opt.NoRedirect}
	ctx = context.WithValue(ctx, callKey{}, cl)
	req := c.rc.R().SetContext(ctx).SetDoNotParseResponse(true)
	if headers != nil {
		req.SetHeaders(headers)
	}
	resp, err := req.Execute(method, full)
	var raw *http.Response
	if resp != nil {
		raw = resp.RawResponse
	}
	status := 0
	if raw != nil {
		status = raw.StatusCode
	}
	if c.opts.OnDone != nil {
		p, _, _ := strings.Cut(target, "?")
		c.opts.OnDone(Observation{Role: c.role, Method: method, Path: p, Status: status, Attempts: cl.attempts, Err: err})
	}
	if err != nil {
		return nil, c.sendError(shown, raw, err)
	}
	if status >= 200 && status <= 299 || opt.NoRedirect && status >= 300 && status <= 399 {
		return raw, nil
	}
	b, _ := io.ReadAll(io.LimitReader(raw.Body, maxErrorBody))
	raw.Body.Close()
	return nil, c.statusError(cl, shown, raw, b)
}
