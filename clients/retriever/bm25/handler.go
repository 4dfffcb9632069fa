package bm25

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/hindsearch/hindsearch/clients/retriever"
)

const (
	// DefaultTopK is the top-k of a /retrieve request that gives none (or
	// null or 0): retrieval_server.py's --topk default.
	DefaultTopK = 3
	// DefaultPort is the port retrieval_server.py listens on (hard-coded
	// in its uvicorn.run call).
	DefaultPort = 8000
	// maxBody bounds a /retrieve request body.
	maxBody = 16 << 20
)

// Style is the shape of the documents a Handler answers with: which of
// Search-R1's retrievers it stands in for.
type Style string

const (
	// StyleDense answers the corpus row, {"id", "contents"}: Search-R1's
	// dense (e5 + faiss) retriever, and its BM25 one over a pyserini index
	// that does not store the raw documents.
	StyleDense Style = "dense"
	// StyleBM25 answers {"title", "text", "contents"} with no id: Search-R1's
	// BM25 retriever over a pyserini index that stores the raw documents
	// (title: the first line of contents with its '"' characters stripped
	// from both ends; text: the lines after it, "" when there are none).
	StyleBM25 Style = "bm25"
)

// ParseStyle returns the style named s ("dense" or "bm25").
func ParseStyle(s string) (Style, error) {
	switch st := Style(s); st {
	case StyleDense, StyleBM25:
		return st, nil
	}
	return "", fmt.Errorf("retriever style %q: want dense or bm25", s)
}

// Handler serves the index as Search-R1's retrieval_server.py (FastAPI)
// does, documents in the given style (PROTOCOLS.md §4 and §6):
//
//   - POST /retrieve {"queries": [str], "topk": int|null, "return_scores":
//     bool} answers 200 {"result": [per query: [{"document": doc, "score":
//     float}]]} when return_scores is true. A missing, null or 0 topk means
//     DefaultTopK; a negative one fails as the reference's search does (500).
//   - Without return_scores: true (it defaults to false) the reference
//     server unpacks the per-query result list into (results, scores): with
//     exactly two queries that "works" and it answers 200 {"result": [the
//     first query's documents, bare]}; with any other number it fails 500
//     "Internal Server Error" (text/plain). This handler does the same.
//   - A body FastAPI would not validate (not JSON, a Content-Type other than
//     JSON, no queries, a field of the wrong type) is 422 {"detail": [{type,
//     loc, msg, input}]}, pydantic's error list (messages approximated).
//   - Any other path is 404 {"detail": "Not Found"}, another method on
//     /retrieve 405 {"detail": "Method Not Allowed"} (there is no health
//     route).
//
// One deviation: a topk above MaxTopK is answered 400 {"detail": ...}
// where the reference would search.
func (ix *Index) Handler(style Style) http.Handler {
	return NewHandler(ix, style)
}

// Searcher is what a Handler serves: Index's Search contract.
type Searcher interface {
	Search(ctx context.Context, queries []string, topk int) ([][]retriever.Hit, error)
}

// NewHandler serves s's Search as Index.Handler does (the benchmark
// serves the previous engine through it, side by side).
func NewHandler(s Searcher, style Style) http.Handler {
	ix := searchHandler{s}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/retrieve":
			writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		case r.Method != http.MethodPost:
			w.Header().Set("Allow", "POST")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
		default:
			ix.serveRetrieve(w, r, style)
		}
	})
}

type searchHandler struct{ Searcher }

// serveRetrieve answers POST /retrieve.
func (ix searchHandler) serveRetrieve(w http.ResponseWriter, r *http.Request, style Style) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"detail": "request body too large"})
		return
	}
	req, problems := decodeRetrieve(r.Header.Get("Content-Type"), body)
	if len(problems) > 0 {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": problems})
		return
	}
	switch {
	case req.topk < 0:
		// pyserini and faiss both raise on a negative k.
		internalError(w)
		return
	case req.topk == 0:
		req.topk = DefaultTopK
	case req.topk > MaxTopK:
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": fmt.Sprintf("topk %d above the embedded retriever's limit of %d", req.topk, MaxTopK)})
		return
	}
	if !req.returnScores && len(req.queries) != 2 {
		// results, scores = <one list per query>: not two values to unpack.
		internalError(w)
		return
	}
	hits, err := ix.Search(r.Context(), req.queries, req.topk)
	if err != nil {
		internalError(w)
		return
	}
	var result any
	if req.returnScores {
		out := make([][]scoredDocument, len(hits))
		for i, hs := range hits {
			out[i] = make([]scoredDocument, len(hs))
			for j, h := range hs {
				out[i][j] = scoredDocument{styled(style, h), h.Score}
			}
		}
		result = out
	} else {
		// The first query's list became "results" and is iterated as if it
		// were the per-query lists: each of its documents is one entry.
		out := make([]any, len(hits[0]))
		for j, h := range hits[0] {
			out[j] = styled(style, h)
		}
		result = out
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": result})
}

// denseDocument is a corpus row as the dense retriever returns it.
type denseDocument struct {
	ID       string `json:"id"`
	Contents string `json:"contents"`
}

// bm25Document is a passage as the BM25 retriever returns it from a
// pyserini index storing raw documents.
type bm25Document struct {
	Title    string `json:"title"`
	Text     string `json:"text"`
	Contents string `json:"contents"`
}

// scoredDocument is a passage and its score, for return_scores: true.
type scoredDocument struct {
	Document any     `json:"document"`
	Score    float64 `json:"score"`
}

// styled is h's document in style.
func styled(style Style, h retriever.Hit) any {
	if style == StyleBM25 {
		title, text, _ := strings.Cut(h.Contents, "\n")
		return bm25Document{Title: strings.Trim(title, `"`), Text: text, Contents: h.Contents}
	}
	return denseDocument{ID: h.ID, Contents: h.Contents}
}

// retrieveRequest is a validated /retrieve body.
type retrieveRequest struct {
	queries      []string
	topk         int
	returnScores bool
}

// problem is one entry of a FastAPI 422 answer's detail list.
type problem struct {
	Type  string          `json:"type"`
	Loc   []any           `json:"loc"`
	Msg   string          `json:"msg"`
	Input json.RawMessage `json:"input"`
	Ctx   map[string]any  `json:"ctx,omitempty"`
}

// decodeRetrieve validates a /retrieve body as FastAPI and pydantic (lax
// mode) would the model {queries: List[str], topk: Optional[int] = None,
// return_scores: bool = False}, collecting every problem.
func decodeRetrieve(contentType string, body []byte) (retrieveRequest, []problem) {
	var req retrieveRequest
	null := json.RawMessage("null")
	if len(body) == 0 {
		return req, []problem{{Type: "missing", Loc: []any{"body"}, Msg: "Field required", Input: null}}
	}
	if contentType != "" && !jsonContentType(contentType) {
		// FastAPI hands the raw bytes to the model.
		in, _ := json.Marshal(string(body))
		return req, []problem{{Type: "model_attributes_type", Loc: []any{"body"}, Msg: "Input should be a valid dictionary or object to extract fields from", Input: in}}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := dec.Decode(&v)
	if err == nil && dec.More() {
		err = errors.New("Extra data")
	}
	if err != nil {
		return req, []problem{{Type: "json_invalid", Loc: []any{"body", dec.InputOffset()}, Msg: "JSON decode error",
			Input: json.RawMessage("{}"), Ctx: map[string]any{"error": err.Error()}}}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return req, []problem{{Type: "model_attributes_type", Loc: []any{"body"}, Msg: "Input should be a valid dictionary or object to extract fields from", Input: raw(v)}}
	}
	var probs []problem
	add := func(typ, msg string, in any, loc ...any) {
		probs = append(probs, problem{Type: typ, Loc: append([]any{"body"}, loc...), Msg: msg, Input: raw(in)})
	}
	switch q, ok := obj["queries"]; {
	case !ok:
		add("missing", "Field required", obj, "queries")
	default:
		list, ok := q.([]any)
		if !ok {
			add("list_type", "Input should be a valid list", q, "queries")
			break
		}
		req.queries = make([]string, len(list))
		for i, e := range list {
			s, ok := e.(string)
			if !ok {
				add("string_type", "Input should be a valid string", e, "queries", i)
			}
			req.queries[i] = s
		}
	}
	if t, ok := obj["topk"]; ok && t != nil {
		switch t := t.(type) {
		case json.Number:
			n, err := t.Int64()
			if err != nil {
				f, _ := t.Float64()
				if f != math.Trunc(f) {
					add("int_from_float", "Input should be a valid integer, got a number with a fractional part", t, "topk")
				}
				n = int64(max(min(f, 1e15), -1e15))
			}
			req.topk = int(max(min(n, MaxTopK+1), -1))
		case bool:
			if t {
				req.topk = 1
			}
		case string:
			n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
			if err != nil {
				add("int_parsing", "Input should be a valid integer, unable to parse string as an integer", t, "topk")
			}
			req.topk = int(max(min(n, MaxTopK+1), -1))
		default:
			add("int_type", "Input should be a valid integer", t, "topk")
		}
	}
	if b, ok := obj["return_scores"]; ok {
		switch b := b.(type) {
		case bool:
			req.returnScores = b
		case json.Number:
			f, _ := b.Float64()
			if f != 0 && f != 1 {
				add("bool_parsing", "Input should be a valid boolean, unable to interpret input", b, "return_scores")
			}
			req.returnScores = f == 1
		case string:
			switch strings.ToLower(b) {
			case "1", "on", "t", "true", "y", "yes":
				req.returnScores = true
			case "0", "off", "f", "false", "n", "no":
			default:
				add("bool_parsing", "Input should be a valid boolean, unable to interpret input", b, "return_scores")
			}
		default:
			add("bool_type", "Input should be a valid boolean", b, "return_scores")
		}
	}
	return req, probs
}

// jsonContentType reports whether FastAPI parses a body of this type as
// JSON: application/json or application/*+json.
func jsonContentType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	return ok && (sub == "json" || strings.HasSuffix(sub, "+json"))
}

// raw is v as JSON (null when it cannot be encoded).
func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// internalError answers as Starlette does for an unhandled exception.
func internalError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = io.WriteString(w, "Internal Server Error")
}

// writeJSON answers with status and v as FastAPI's JSONResponse writes it:
// compact, HTML characters unescaped, no trailing newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		internalError(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}
