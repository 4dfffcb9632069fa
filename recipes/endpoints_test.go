package recipes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadEndpoints(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "endpoints.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// llm-d's schema: port a string; a number, a host name and a repeat
	// are read too.
	got, err := ReadEndpoints(write(`endpoints:
  - name: vllm-0
    address: 10.0.0.1
    port: "8000"
    labels: {node: n1, gpu: "0"}
  - name: vllm-1
    address: node2.cluster
    port: 8001
  - name: vllm-0-again
    address: 10.0.0.1
    port: "8000"
`))
	want := []string{"http://10.0.0.1:8000", "http://node2.cluster:8001"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ReadEndpoints = %v, %v; want %v", got, err, want)
	}
	for _, body := range []string{"", "endpoints: []\n"} {
		if got, err := ReadEndpoints(write(body)); err != nil || len(got) != 0 {
			t.Errorf("%q: %v, %v; want none, no error", body, got, err)
		}
	}
	for body, want := range map[string]string{
		"endpoints:\n  - name: a\n    port: \"8000\"\n":                                      "endpoints.yaml:2: endpoints[0]: no address",
		"endpoints:\n  - {name: a, address: h, port: \"8000\"}\n  - {name: b, address: h}\n": "endpoints.yaml:3: endpoints[1]: port \"\" is not a port number",
		"endpoints:\n  - {name: a, address: h, port: http}\n":                                "endpoints[0]: port \"http\"",
		"endpoints: [\n": "endpoints.yaml",
		"endpoint: []\n": "field endpoint not found",
	} {
		_, err := ReadEndpoints(write(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", body, err, want)
		}
	}
}

// policy.endpoints_file sets policy.urls at load; with policy.urls set
// too, or naming a file that lists none, the recipe is refused.
func TestEndpointsFileKey(t *testing.T) {
	dir := t.TempDir()
	ep := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(ep, []byte("endpoints:\n  - {name: a, address: 127.0.0.1, port: \"18000\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(filepath.Join(dir, "c.jsonl"), []byte(`{"id":"1","contents":"\"T\"\nx"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	body := "retriever:\n  corpus: c.jsonl\ntrain:\n  data: [" + filepath.Join(dir, "q.jsonl") + "]\npolicy:\n  endpoints_file: endpoints.yaml\n  tokenizer: qwen2.5\n  model: Qwen/Qwen2.5-3B-Instruct\n"
	if err := os.WriteFile(filepath.Join(dir, "q.jsonl"), []byte(`{"id":"1","question":"q","golden_answers":["a"]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(recipe, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Policy.URLs, []string{"http://127.0.0.1:18000"}) || r.Policy.EndpointsFile != ep {
		t.Errorf("policy.urls %v, endpoints_file %s", r.Policy.URLs, r.Policy.EndpointsFile)
	}
	if _, err := Load(recipe, []string{"policy.urls=http://127.0.0.1:9"}, nil); err == nil || !strings.Contains(err.Error(), "policy.endpoints_file: set it or policy.urls, not both") {
		t.Errorf("both set: %v", err)
	}
	if err := os.WriteFile(ep, []byte("endpoints: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(recipe, nil, nil); err == nil || !strings.Contains(err.Error(), "lists no endpoint") {
		t.Errorf("an empty file: %v", err)
	}
	if _, err := Load(recipe, []string{"policy.server=tinker", "policy.tokenize=local"}, nil); err == nil || !strings.Contains(err.Error(), "policy.endpoints_file") {
		t.Errorf("tinker: %v", err)
	}
}

// WriteEndpoints writes what ReadEndpoints reads back, atomically (no
// temporary file left), and refuses a URL without a port.
func TestWriteEndpointsReadsBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")
	urls := []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"}
	if err := WriteEndpoints(path, urls); err != nil {
		t.Fatal(err)
	}
	got, err := ReadEndpoints(path)
	if err != nil || !slices.Equal(got, urls) {
		t.Fatalf("read back %v, %v", got, err)
	}
	if err := WriteEndpoints(path, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadEndpoints(path); err != nil || len(got) != 0 {
		t.Errorf("an empty list read back as %v, %v", got, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left: %v", entries)
	}
	if err := WriteEndpoints(path, []string{"http://10.0.0.1"}); err == nil {
		t.Error("a URL without a port was written")
	}
}
