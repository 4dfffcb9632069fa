// Package router is the client of a vllm-router (vllm-project/router,
// the Rust router SkyRL and prime-rl put in front of their vLLM fleets) in
// its control role: the program reads and edits the router's worker list
// so that the router only ever sends a request to a policy server that
// holds the weights the request names. Generation through the router is
// the policy package's client pointed at the router's URL (with
// policy.WithSession); this package never carries a completion.
//
// The routes, as vllm-router 0.1.17 serves them (src/server.rs; tried on
// loopback, docs/conformance.md): GET /list_workers answers
// {"urls": [...]}; POST /add_worker?url=U probes U's /health and answers
// 200 text, 400 "Worker U already exists" for a member (and blocks until
// the router's startup timeout, 600 s by default, for a worker that does
// not answer: add only a server known healthy); POST /remove_worker?url=U
// answers 200 text, also for a URL that is not a member.
package router

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Router is what the program needs from a router in front of the policy
// servers: its worker list, kept equal to the servers that can serve the
// run's requests.
type Router interface {
	// Workers lists the base URLs the router routes to.
	Workers(ctx context.Context) ([]string, error)
	// Add makes the router route to the policy server at url (nil when
	// it already does).
	Add(ctx context.Context, url string) error
	// Remove stops the router routing to url (nil when it did not).
	Remove(ctx context.Context, url string) error
	// URL is the router's base URL, for messages.
	URL() string
}

// Client is the Router of one vllm-router.
type Client struct {
	tc *transport.Client
}

var _ Router = (*Client)(nil)

// New builds the client of the router described by opts (opts.Role
// defaults to "router").
func New(opts transport.Options) (*Client, error) {
	if opts.Role == "" {
		opts.Role = "router"
	}
	tc, err := transport.New(opts)
	if err != nil {
		return nil, err
	}
	return &Client{tc: tc}, nil
}

// URL returns the router's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Close closes idle connections.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the router.
func (c *Client) do(ctx context.Context, method, path string, out any) error {
	return c.tc.Do(ctx, method, path, nil, out)
}

type listResponse struct {
	URLs []string `json:"urls"`
}

// Workers returns GET /list_workers' urls.
func (c *Client) Workers(ctx context.Context) ([]string, error) {
	var resp listResponse
	if err := c.do(ctx, http.MethodGet, "/list_workers", &resp); err != nil {
		return nil, err
	}
	return resp.URLs, nil
}

// Add posts /add_worker?url=; the router's 400 "already exists" is
// success.
func (c *Client) Add(ctx context.Context, u string) error {
	err := c.do(ctx, http.MethodPost, "/add_worker?url="+url.QueryEscape(u), nil)
	if alreadyMember(err) {
		return nil
	}
	return err
}

// Remove posts /remove_worker?url=.
func (c *Client) Remove(ctx context.Context, u string) error {
	return c.do(ctx, http.MethodPost, "/remove_worker?url="+url.QueryEscape(u), nil)
}

// alreadyMember reports the router's answer to adding a member: 400
// "Worker U already exists".
func alreadyMember(err error) bool {
	var se *transport.StatusError
	return errors.As(err, &se) && se.Status == http.StatusBadRequest && strings.Contains(se.Body, "already exists")
}

// SameURL reports whether a and b name the same server, as a router lists
// its workers: base URLs equal but for a trailing slash.
func SameURL(a, b string) bool { return strings.TrimRight(a, "/") == strings.TrimRight(b, "/") }

// Compare sets a router's worker list against servers (base URLs):
// foreign are the workers it lists that servers lacks, in its order;
// missing the servers it does not list, in theirs.
func Compare(listed, servers []string) (foreign, missing []string) {
	in := func(u string, list []string) bool {
		return slices.ContainsFunc(list, func(v string) bool { return SameURL(u, v) })
	}
	for _, u := range listed {
		if !in(u, servers) {
			foreign = append(foreign, u)
		}
	}
	for _, u := range servers {
		if !in(u, listed) {
			missing = append(missing, u)
		}
	}
	return foreign, missing
}
