package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// serveRetriever runs `serve retriever` with args on a loopback port and
// returns its base URL; the server stops when the test ends.
func serveRetriever(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.jsonl")
	lines := `{"id": "0", "contents": "\"Zebra\"\nZebras are striped."}` + "\n" +
		`{"id": "1", "contents": "\"Lion\"\nLions roar.\nThey hunt zebras."}` + "\n"
	if err := os.WriteFile(corpus, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	var stdout bytes.Buffer
	root := newRootCmd(&stdout, pw, nil)
	root.SetArgs(append([]string{"serve", "retriever", "--corpus", corpus, "--index-dir", filepath.Join(dir, "idx"),
		"--addr", "127.0.0.1:0", "--progress", "off"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		pw.Close()
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve retriever: %v", err)
		}
	})
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+) `)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		io.Copy(io.Discard, pr)
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatal("serve retriever exited without serving")
		}
		return u
	case <-time.After(2 * time.Minute):
		t.Fatal("serve retriever did not start")
	}
	return ""
}

func postRetrieve(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url+"/retrieve", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// `serve retriever --style bm25` answers Search-R1's BM25 shape: title,
// text and contents, no id.
func TestServeRetrieverStyleBM25ServesDocumentsWithoutID(t *testing.T) {
	u := serveRetriever(t, "--style", "bm25")
	status, body := postRetrieve(t, u, `{"queries": ["lions"], "topk": 1, "return_scores": true}`)
	want := `{"result":[[{"document":{"title":"Lion","text":"Lions roar.\nThey hunt zebras.","contents":"\"Lion\"\nLions roar.\nThey hunt zebras."},"score":`
	if status != 200 || !strings.HasPrefix(body, want) || strings.Contains(body, `"id"`) {
		t.Fatalf("%d %s", status, body)
	}
}

// The default style is the dense server's corpus rows, and a request
// without return_scores fails as the reference server does.
func TestServeRetrieverDefaultStyleIsDense(t *testing.T) {
	u := serveRetriever(t)
	status, body := postRetrieve(t, u, `{"queries": ["lions"], "topk": 1, "return_scores": true}`)
	if want := `{"result":[[{"document":{"id":"1","contents":"\"Lion\"\nLions roar.\nThey hunt zebras."},"score":`; status != 200 || !strings.HasPrefix(body, want) {
		t.Fatalf("%d %s", status, body)
	}
	if status, body := postRetrieve(t, u, `{"queries": ["lions"], "topk": 1}`); status != 500 || body != "Internal Server Error" {
		t.Fatalf("without return_scores: %d %s", status, body)
	}
}

// Search-R1's retrieval_server.py listens on port 8000.
func TestServeRetrieverDefaultAddrIsPort8000(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard, nil)
	cmd, _, err := root.Find([]string{"serve", "retriever"})
	if err != nil {
		t.Fatal(err)
	}
	if f := cmd.Flags().Lookup("addr"); f == nil || f.DefValue != "127.0.0.1:8000" {
		t.Fatalf("--addr default %v", f)
	}
	if f := cmd.Flags().Lookup("style"); f == nil || f.DefValue != "dense" {
		t.Fatalf("--style default %v", f)
	}
}

func TestServeRetrieverRejectsUnknownStyle(t *testing.T) {
	_, _, err := runCLI(t, nil, "serve", "retriever", "--corpus", "x.jsonl", "--style", "e5")
	if err == nil || !strings.Contains(err.Error(), "--style") || !strings.Contains(err.Error(), "want dense or bm25") {
		t.Fatalf("err %v", err)
	}
}
