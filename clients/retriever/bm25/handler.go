package bm25

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

const (
	// DefaultTopK is the top-k of a /retrieve request that gives none (or
	// 0), as in the Search-R1 retrieval server.
	DefaultTopK = 3
	// maxBody bounds a /retrieve request body.
	maxBody = 16 << 20
)

// retrieveRequest is the body of POST /retrieve.
type retrieveRequest struct {
	Queries      []string `json:"queries"`
	TopK         int      `json:"topk"`
	ReturnScores bool     `json:"return_scores"`
}

// document is a passage as the Search-R1 server returns it.
type document struct {
	ID       string `json:"id"`
	Contents string `json:"contents"`
}

// scoredDocument is a passage and its score, for return_scores: true.
type scoredDocument struct {
	Document document `json:"document"`
	Score    float64  `json:"score"`
}

// Handler serves the index with the Search-R1 retrieval protocol
// (PROTOCOLS.md §4):
//
//   - POST /retrieve {"queries": [str], "topk": int, "return_scores": bool}
//     answers {"result": [per query: [{"document": {"id", "contents"},
//     "score"}]]}, or, when return_scores is false, {"result": [per query:
//     [{"id", "contents"}]]}. A missing or zero topk means DefaultTopK. A
//     bad body is answered 400 with {"detail": "..."}.
//   - GET /health answers 200 {"status": "ok"}.
func (ix *Index) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /retrieve", ix.serveRetrieve)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

// serveRetrieve answers POST /retrieve.
func (ix *Index) serveRetrieve(w http.ResponseWriter, r *http.Request) {
	req, err := decodeRetrieve(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": err.Error()})
		return
	}
	hits, err := ix.Search(r.Context(), req.Queries, req.TopK)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": err.Error()})
		return
	}
	var result any
	if req.ReturnScores {
		out := make([][]scoredDocument, len(hits))
		for i, hs := range hits {
			out[i] = make([]scoredDocument, len(hs))
			for j, h := range hs {
				out[i][j] = scoredDocument{document{h.ID, h.Contents}, h.Score}
			}
		}
		result = out
	} else {
		out := make([][]document, len(hits))
		for i, hs := range hits {
			out[i] = make([]document, len(hs))
			for j, h := range hs {
				out[i][j] = document{h.ID, h.Contents}
			}
		}
		result = out
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": result})
}

// decodeRetrieve reads and checks a /retrieve body.
func decodeRetrieve(body io.Reader) (*retrieveRequest, error) {
	var req retrieveRequest
	dec := json.NewDecoder(body)
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("bad request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("bad request body: data after the JSON object")
	}
	switch {
	case req.Queries == nil:
		return nil, errors.New("bad request body: \"queries\" is required")
	case req.TopK == 0:
		req.TopK = DefaultTopK
	case req.TopK < 0 || req.TopK > MaxTopK:
		return nil, fmt.Errorf("bad request body: \"topk\" must be in [1, %d]", MaxTopK)
	}
	return &req, nil
}

// writeJSON answers with status and v as JSON (HTML characters unescaped,
// as Python's json module writes them).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"detail":"cannot encode the response"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
