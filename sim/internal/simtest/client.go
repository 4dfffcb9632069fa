package simtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/sim/internal/httpx"
)

// Client talks JSON to a simulated server at Base (a URL with no trailing
// slash), failing T on transport errors.
type Client struct {
	T    *testing.T
	Base string
}

// Post sends body as JSON and decodes the JSON answer (for a body that is
// not a JSON object: {"_text": body}). Every answer must carry the
// simulator header.
func (c Client) Post(path string, body any) (int, map[string]any) {
	c.T.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		c.T.Fatal(err)
	}
	resp, err := http.Post(c.Base+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		c.T.Fatal(err)
	}
	defer resp.Body.Close()
	return c.decode(path, resp)
}

// Get fetches path and decodes the answer as Post does.
func (c Client) Get(path string) (int, map[string]any) {
	c.T.Helper()
	resp, err := http.Get(c.Base + path)
	if err != nil {
		c.T.Fatal(err)
	}
	defer resp.Body.Close()
	return c.decode(path, resp)
}

func (c Client) decode(path string, resp *http.Response) (int, map[string]any) {
	c.T.Helper()
	if resp.Header.Get(httpx.SimulatorHeader) != "true" {
		c.T.Errorf("%s: response lacks the %s header", path, httpx.SimulatorHeader)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.T.Fatal(err)
	}
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		out = map[string]any{"_text": string(b)}
	}
	return resp.StatusCode, out
}

// Result polls a simulated trainer's retrieve_future until the request rid
// is done and returns its status and body (fatal after 30 s).
func (c Client) Result(rid string) (int, map[string]any) {
	c.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, body := c.Post("/api/v1/retrieve_future", map[string]any{"request_id": rid})
		if st == http.StatusRequestTimeout || st == http.StatusOK && body["type"] == "try_again" {
			continue // SkyRL's held poll (408), or the hosted try_again
		}
		return st, body
	}
	c.T.Fatalf("request %s not done in 30 s", rid)
	return 0, nil
}

// Call posts a sequenced call to a simulated trainer and waits for its
// result, failing the test on any error.
func (c Client) Call(path string, body any) map[string]any {
	c.T.Helper()
	st, acc := c.Post(path, body)
	if st != http.StatusOK {
		c.T.Fatalf("%s: status %d %v", path, st, acc)
	}
	st, res := c.Result(acc["request_id"].(string))
	if st != http.StatusOK {
		c.T.Fatalf("%s result: status %d %v", path, st, res)
	}
	return res
}

// CreateSession opens a session on a simulated trainer and returns its id.
func CreateSession(c Client) string {
	c.T.Helper()
	st, body := c.Post("/api/v1/create_session", map[string]any{"tags": []string{"test"}, "user_metadata": map[string]any{},
		"sdk_version": "0.0.0", "type": "create_session"})
	if st != http.StatusOK {
		c.T.Fatalf("create_session: %d %v", st, body)
	}
	return body["session_id"].(string)
}

// FBBody is the body of a forward_backward call of model at seq with
// lossFn, its loss_fn_config cfg (nil: none) and data.
func FBBody(model string, seq int, lossFn string, cfg map[string]float64, data ...map[string]any) map[string]any {
	in := map[string]any{"data": data, "loss_fn": lossFn}
	if cfg != nil {
		in["loss_fn_config"] = cfg
	}
	return map[string]any{"model_id": model, "seq_id": seq, "forward_backward_input": in, "type": "forward_backward"}
}

// OptimBody is the body of an optim_step call of model at seq: Adam at
// learning rate lr with the default betas and eps, no weight decay.
func OptimBody(model string, seq int, lr float64) map[string]any {
	return map[string]any{"model_id": model, "seq_id": seq, "type": "optim_step",
		"adam_params": map[string]any{"learning_rate": lr, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0}}
}

// UnpackArchive extracts the simulated trainer's archive at path, in
// either layout (weights.PackArchive), into dir and returns the names of
// its files, sorted.
func UnpackArchive(t *testing.T, path, dir string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r io.Reader = bytes.NewReader(raw)
	if bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		if r, err = gzip.NewReader(r); err != nil {
			t.Fatal(err)
		}
	}
	tr := tar.NewReader(r)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeDir && (h.Name == "/" || h.Name == "./") {
			continue // the root
		}
		h.Name = strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, "/") || strings.Contains(h.Name, "..") {
			t.Fatalf("unexpected archive entry %q (type %c)", h.Name, h.Typeflag)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, h.Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	slices.Sort(names)
	return names
}
