package retriever

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hindsearch/hindsearch/clients/transport"
)

// Client is the Retriever of one Search-R1 retrieval server.
type Client struct {
	tc *transport.Client
}

var _ Retriever = (*Client)(nil)

// New builds the client of the retrieval server described by opts
// (opts.Role defaults to "retriever").
func New(opts transport.Options) (*Client, error) {
	if opts.Role == "" {
		opts.Role = "retriever"
	}
	tc, err := transport.New(opts)
	if err != nil {
		return nil, err
	}
	return &Client{tc: tc}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.tc.BaseURL() }

// Close closes idle connections.
func (c *Client) Close() { c.tc.Close() }

// do is the one path of every call to the server.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.tc.Do(ctx, method, path, in, out)
}

type retrieveBody struct {
	Queries      []string `json:"queries"`
	TopK         int      `json:"topk"`
	ReturnScores bool     `json:"return_scores"`
}

type wireHit struct {
	Document struct {
		ID       json.RawMessage `json:"id"`
		Contents *string         `json:"contents"`
		Title    *string         `json:"title"`
		Text     *string         `json:"text"`
	} `json:"document"`
	Score *float64 `json:"score"`
}

// Retrieve sends POST /retrieve with return_scores true and returns, for
// each query in order, its hits best first. A document's text is its
// contents (all Search-R1's agent reads); one without contents but with
// title and text gets contents "\"<title>\"\n<text>". A document without
// id (Search-R1's BM25 retriever sends {title, text, contents}) gets
// SynthID(contents). A document with neither contents (nor title and
// text) is an error naming the server and the hit's position.
func (c *Client) Retrieve(ctx context.Context, queries []string, topk int) ([][]Hit, error) {
	if len(queries) == 0 {
		return [][]Hit{}, nil
	}
	if topk <= 0 {
		return nil, fmt.Errorf("retriever retrieve: topk %d, want > 0", topk)
	}
	var resp retrieveResponse
	body := retrieveBody{Queries: queries, TopK: topk, ReturnScores: true}
	if err := c.do(ctx, http.MethodPost, "/retrieve", body, &resp); err != nil {
		return nil, fmt.Errorf("retriever retrieve: %w", err)
	}
	out, err := resp.hits(len(queries))
	if err != nil {
		return nil, fmt.Errorf("retriever retrieve %s: %w", c.URL(), err)
	}
	return out, nil
}

// hits converts r's result, which must hold one list per query.
func (r *retrieveResponse) hits(queries int) ([][]Hit, error) {
	if len(r.Result) != queries {
		return nil, fmt.Errorf("%d results for %d queries", len(r.Result), queries)
	}
	out := make([][]Hit, queries)
	for q, hits := range r.Result {
		out[q] = make([]Hit, len(hits))
		for i, h := range hits {
			hit, err := convertHit(h)
			if err != nil {
				return nil, fmt.Errorf("query %d hit %d: %w", q, i, err)
			}
			out[q][i] = hit
		}
	}
	return out, nil
}

// retrieveResponse is a /retrieve answer as encoding/json reads it.
type retrieveResponse struct {
	Result [][]wireHit `json:"result"`
}

func convertHit(h wireHit) (Hit, error) {
	d := h.Document
	var hit Hit
	id := bytes.TrimSpace(d.ID)
	hasID := len(id) > 0 && string(id) != "null"
	switch {
	case !hasID:
	case id[0] == '"':
		if err := json.Unmarshal(id, &hit.ID); err != nil {
			return hit, fmt.Errorf("document id: %w", err)
		}
	default:
		var n json.Number
		if err := json.Unmarshal(id, &n); err != nil {
			return hit, fmt.Errorf("document id %s: neither string nor number", id)
		}
		hit.ID = n.String()
	}
	switch {
	case d.Contents != nil:
		hit.Contents = *d.Contents
	case d.Title != nil && d.Text != nil:
		hit.Contents = titleText(*d.Title, *d.Text)
	case !hasID:
		return hit, errors.New("document without id or contents")
	default:
		return hit, fmt.Errorf("document %s without contents", hit.ID)
	}
	if !hasID {
		hit.ID, hit.IDFromContents = SynthID(hit.Contents), true
	}
	if h.Score == nil {
		return hit, fmt.Errorf("document %s without score", hit.ID)
	}
	hit.Score = *h.Score
	return hit, nil
}

// titleText is the contents of a document sent as title and text only:
// the wiki-18 form, a quoted title line and then the text.
func titleText(title, text string) string { return "\"" + title + "\"\n" + text }

// SplitContents splits corpus contents as Search-R1 does: the title is the
// first line (quotes kept as they are) and the text is everything after the
// first newline ("" when there is none).
func SplitContents(contents string) (title, text string) {
	title, text, _ = strings.Cut(contents, "\n")
	return title, text
}
