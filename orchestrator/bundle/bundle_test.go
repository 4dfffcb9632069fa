package bundle

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/hub"
	"github.com/hindsearch/hindsearch/clients/hub/hubtest"
	"github.com/hindsearch/hindsearch/clients/transport"
)

// stand-in files with the real names and layouts, small.
func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

func faissFlat(n int64, d int32) []byte {
	b := []byte("IxFI")
	b = binary.LittleEndian.AppendUint32(b, uint32(d))
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	b = binary.LittleEndian.AppendUint64(b, 1<<20)
	b = binary.LittleEndian.AppendUint64(b, 1<<20)
	b = append(b, 1)
	b = binary.LittleEndian.AppendUint32(b, 0)
	return append(b, make([]byte, 4*int(n)*int(d))...)
}

func testManifest(t *testing.T) *Manifest {
	m, err := Parse([]byte(`bundles:
  wiki18:
    about: stand-in corpus
    files:
      - {repo: PeterJinGo/wiki-18-corpus, type: dataset, path: wiki-18.jsonl.gz}
    make:
      - {kind: gunzip, from: [wiki-18.jsonl.gz], to: wiki-18.jsonl, size: 100}
    checks:
      - {kind: lines, file: wiki-18.jsonl, lines: 3}
  wiki18-e5-flat:
    about: stand-in index
    files:
      - {repo: PeterJinGo/wiki-18-e5-index, type: dataset, path: part_aa}
      - {repo: PeterJinGo/wiki-18-e5-index, type: dataset, path: part_ab}
    make:
      - {kind: concat, from: [part_aa, part_ab], to: e5_Flat.index}
    checks:
      - {kind: faiss, file: e5_Flat.index, vectors: 3}
  eval-sets:
    about: stand-in eval set
    files:
      - {repo: RUC-NLPIR/FlashRAG_datasets, type: dataset, path: nq/test.jsonl, as: nq.jsonl}
    checks:
      - {kind: questions, file: nq.jsonl, questions: 1}
  eval-rand1000:
    about: stand-in ASearcher subset
    files:
      - {repo: inclusionAI/ASearcher-test-data, type: dataset, path: NQ_rand1000/test.jsonl, as: nq.jsonl}
    checks:
      - {kind: questions, file: nq.jsonl, questions: 1}
  paper:
    about: all
    needs: [wiki18, wiki18-e5-flat, eval-sets, "tokenizer:Qwen/Qwen2.5-3B-Instruct"]
`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fakeHub(t *testing.T) *hubtest.Hub {
	h := hubtest.New(t)
	corpus := []byte(`{"id": "0", "contents": "\"A\"\nfirst"}` + "\n" + `{"id": "1", "contents": "\"B\"\nsecond"}` + "\n" + `{"id": "2", "contents": "\"C\"\nthird"}` + "\n")
	h.Add("dataset", "PeterJinGo/wiki-18-corpus", "wiki-18.jsonl.gz", gz(corpus), true, false)
	idx := faissFlat(3, 4)
	h.Add("dataset", "PeterJinGo/wiki-18-e5-index", "part_aa", idx[:30], true, false)
	h.Add("dataset", "PeterJinGo/wiki-18-e5-index", "part_ab", idx[30:], true, false)
	h.Add("dataset", "RUC-NLPIR/FlashRAG_datasets", "nq/test.jsonl", []byte(`{"id": "test_0", "question": "who wrote hamlet", "golden_answers": ["Shakespeare"]}`+"\n"), false, false)
	h.Add("dataset", "inclusionAI/ASearcher-test-data", "NQ_rand1000/test.jsonl", []byte(`{"question": "who wrote hamlet", "answer": ["Shakespeare"]}`+"\n"), false, false)
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		h.Add("model", "Qwen/Qwen2.5-3B-Instruct", f, []byte(`{}`), false, false)
	}
	return h
}

func opts(t *testing.T, h *hubtest.Hub, out *bytes.Buffer) Options {
	o := transport.DefaultOptions("hub", h.URL)
	o.Timeout = 0
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 2*time.Millisecond
	c, err := hub.New(h.URL, "", o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return Options{Hub: c, Cache: filepath.Join(dir, "hub"), Dir: filepath.Join(dir, "data"), Out: out}
}

// Every bundle of the paper, from the fake hub in small form: files into
// the hub cache, outputs made and checked, the tokenizer into the cache
// only; a second get makes only metadata requests; verify passes, and
// fails naming the data get command once an output is gone.
func TestGetPaperBundles(t *testing.T) {
	h := fakeHub(t)
	var out bytes.Buffer
	o := opts(t, h, &out)
	bs, err := testManifest(t).Resolve([]string{"paper"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range bs {
		names = append(names, b.Name)
	}
	if strings.Join(names, " ") != "wiki18 wiki18-e5-flat eval-sets tokenizer:Qwen/Qwen2.5-3B-Instruct paper" {
		t.Fatalf("resolved %v", names)
	}
	ctx := context.Background()
	if err := Get(ctx, bs, o); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, p := range []string{"wiki18/wiki-18.jsonl", "wiki18-e5-flat/e5_Flat.index", "eval-sets/nq.jsonl"} {
		if _, err := os.Stat(filepath.Join(o.Dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if n, _, err := FaissHeader(filepath.Join(o.Dir, "wiki18-e5-flat", "e5_Flat.index")); err != nil || n != 3 {
		t.Errorf("the concatenated index: %d vectors, %v", n, err)
	}
	if m, _ := filepath.Glob(filepath.Join(o.Cache, "models--Qwen--Qwen2.5-3B-Instruct", "snapshots", "*", "tokenizer.json")); len(m) != 1 {
		t.Errorf("tokenizer not in the hub cache layout: %v", m)
	}
	for _, w := range []string{"check wiki18/wiki-18.jsonl: 3 lines", "check wiki18-e5-flat/e5_Flat.index: 3 vectors of dimension 4", "check eval-sets/nq.jsonl: 1 questions"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	gets, heads := h.Requests["GET"], h.Requests["HEAD"]
	out.Reset()
	if err := Get(ctx, bs, o); err != nil {
		t.Fatal(err)
	}
	if n := h.Requests["HEAD"] - heads; n != 7 {
		t.Errorf("second get: %d metadata requests, want one per file (7)", n)
	}
	if h.Requests["GET"] != gets || !strings.Contains(out.String(), "wiki18: up to date") {
		t.Errorf("second get: %d GETs more\n%s", h.Requests["GET"]-gets, out.String())
	}
	if err := Verify(ctx, bs, o); err != nil {
		t.Errorf("verify: %v", err)
	}
	_ = os.Remove(filepath.Join(o.Dir, "eval-sets", "nq.jsonl"))
	if err := Verify(ctx, bs, o); err == nil || !strings.Contains(err.Error(), "orchestrate data get eval-sets") {
		t.Errorf("verify after a removal: %v", err)
	}
}

// ASearcher's subset files are fetched and read; a questions check holds
// the count.
func TestGetRand1000(t *testing.T) {
	h := fakeHub(t)
	var out bytes.Buffer
	o := opts(t, h, &out)
	m := testManifest(t)
	bs, _ := m.Resolve([]string{"eval-rand1000"})
	if err := Get(context.Background(), bs, o); err != nil || !strings.Contains(out.String(), "check eval-rand1000/nq.jsonl: 1 questions") {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m.Bundles["eval-rand1000"].Checks[0].Questions = 1000
	bs, _ = m.Resolve([]string{"eval-rand1000"})
	if err := Verify(context.Background(), bs, o); err == nil || !strings.Contains(err.Error(), "1 questions, want 1000") {
		t.Errorf("verify of a short file: %v", err)
	}
}

// The disk preflight compares the peak with the space free and names both.
func TestPreflightRefusesWhatDoesNotFit(t *testing.T) {
	h := fakeHub(t)
	var out bytes.Buffer
	o := opts(t, h, &out)
	o.Free = func(string) (int64, bool) { return 10, true }
	bs, _ := testManifest(t).Resolve([]string{"wiki18"})
	err := Get(context.Background(), bs, o)
	if err == nil || !strings.Contains(err.Error(), "not enough disk") || !strings.Contains(err.Error(), "10 B is free") {
		t.Fatalf("%v", err)
	}
	if h.Requests["GET"] != 0 {
		t.Errorf("%d GETs before the preflight refused", h.Requests["GET"])
	}
	o.Free, o.DryRun = nil, true
	if err := Get(context.Background(), bs, o); err != nil || h.Requests["GET"] != 0 || !strings.Contains(out.String(), "wiki18/wiki-18.jsonl.gz") {
		t.Errorf("dry run: %v, %d GETs\n%s", err, h.Requests["GET"], out.String())
	}
}

// The shipped manifest parses, every need is a bundle, and paper names
// what the main recipe reads.
func TestShippedManifest(t *testing.T) {
	m, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := m.Resolve([]string{"paper", "wiki18-bm25"})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) < 6 {
		t.Errorf("paper resolves to %d bundles", len(bs))
	}
	if _, err := m.Resolve([]string{"nope"}); err == nil || !strings.Contains(err.Error(), "searchr1-train") {
		t.Errorf("unknown bundle: %v", err)
	}
}

// A bm25 step builds the index once: its check takes the count the build
// gave; verify opens it (once).
func TestBM25BuiltOnce(t *testing.T) {
	m, err := Parse([]byte(`bundles:
  wiki18:
    about: stand-in corpus
    files:
      - {repo: PeterJinGo/wiki-18-corpus, type: dataset, path: wiki-18.jsonl.gz}
    make:
      - {kind: gunzip, from: [wiki-18.jsonl.gz], to: wiki-18.jsonl}
  wiki18-bm25:
    about: stand-in index
    needs: [wiki18]
    make:
      - {kind: bm25, from: [wiki18/wiki-18.jsonl], to: bm25}
    checks:
      - {kind: bm25, file: bm25, docs: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	h := fakeHub(t)
	var out bytes.Buffer
	o := opts(t, h, &out)
	calls := 0
	o.BuildBM25 = func(_ context.Context, corpus, dir string) (int, error) {
		calls++
		if _, err := os.Stat(corpus); err != nil {
			return 0, err
		}
		return 3, nil
	}
	bs, _ := m.Resolve([]string{"wiki18-bm25"})
	if err := Get(context.Background(), bs, o); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if calls != 1 || !strings.Contains(out.String(), "check wiki18-bm25/bm25: 3 documents") {
		t.Errorf("%d builds\n%s", calls, out.String())
	}
	if err := Verify(context.Background(), bs, o); err != nil || calls != 2 {
		t.Errorf("verify: %v, %d opens in all", err, calls)
	}
}
