package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/hub/hubtest"
	"github.com/hindsearch/hindsearch/clients/transport"
)

func client(t testing.TB, h *hubtest.Hub, token string) *Client {
	o := transport.DefaultOptions("hub", h.URL)
	o.Timeout = 0
	o.RetryWaitMin, o.RetryWaitMax = time.Millisecond, 2*time.Millisecond
	c, err := New(h.URL, token, o)
	if err != nil {
		t.Fatal(err)
	}
	c.MinPart = 1 << 10
	return c
}

func blob(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// A file lands in huggingface_hub's layout: blobs/{etag},
// snapshots/{commit}/{path} a relative link to it, refs/main the commit;
// an LFS file's blob is named by its sha256. A second Get asks only for
// the metadata.
func TestGetCacheLayout(t *testing.T) {
	h := hubtest.New(t)
	small, big := []byte(`{"model_type":"qwen2"}`), blob(10_000, 1)
	h.Add("model", "Qwen/Qwen3-8B", "config.json", small, false, false)
	h.Add("dataset", "PeterJinGo/nq_hotpotqa_train", "train.parquet", big, true, false)
	c := client(t, h, "")
	dir := t.TempDir()
	ctx := context.Background()
	for _, f := range []File{{Repo: "Qwen/Qwen3-8B", Type: Model, Path: "config.json"}, {Repo: "PeterJinGo/nq_hotpotqa_train", Type: Dataset, Path: "train.parquet"}} {
		res, err := c.Get(ctx, f, dir)
		if err != nil {
			t.Fatal(err)
		}
		commit := h.Commit(f.Type, f.Repo)
		want := filepath.Join(dir, RepoFolder(f.Repo, f.Type), "snapshots", commit, f.Path)
		if res.Path != want || !res.Fetched {
			t.Errorf("%s: %+v, want %s fetched", f, res, want)
		}
		target, err := os.Readlink(want)
		if err != nil || !strings.HasPrefix(target, "../../blobs/") {
			t.Errorf("%s: link %q %v, want a relative link into blobs/", f, target, err)
		}
		if ref, _ := os.ReadFile(filepath.Join(dir, RepoFolder(f.Repo, f.Type), "refs", "main")); string(ref) != commit {
			t.Errorf("%s: refs/main %q, want %s", f, ref, commit)
		}
		got, _ := os.ReadFile(want)
		if !bytes.Equal(got, map[string][]byte{"config.json": small, "train.parquet": big}[f.Path]) {
			t.Errorf("%s: wrong bytes", f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "datasets--PeterJinGo--nq_hotpotqa_train", "blobs", sha256Hex(big))); err != nil {
		t.Errorf("the LFS blob is not named by its sha256: %v", err)
	}
	gets := h.Requests["GET"]
	res, err := c.Get(ctx, File{Repo: "PeterJinGo/nq_hotpotqa_train", Type: Dataset, Path: "train.parquet"}, dir)
	if err != nil || res.Fetched || h.Requests["GET"] != gets {
		t.Errorf("second Get: %+v %v, %d GETs more; want the cached file and no GET", res, err, h.Requests["GET"]-gets)
	}
}

// A partial file (a kill, a dropped connection) is resumed with a Range
// request, in one stream or in parallel ranges, and the result is the
// file.
func TestResumeAndParallelRanges(t *testing.T) {
	data := blob(50_000, 2)
	for _, parallel := range []int{1, 4} {
		h := hubtest.New(t)
		h.Add("dataset", "PeterJinGo/wiki-18-corpus", "wiki-18.jsonl.gz", data, true, false)
		h.DropAfter, h.DropTimes = 3_000, 3
		c := client(t, h, "")
		c.Parallel = parallel
		dir := t.TempDir()
		res, err := c.Get(context.Background(), File{Repo: "PeterJinGo/wiki-18-corpus", Type: Dataset, Path: "wiki-18.jsonl.gz"}, dir)
		if err != nil {
			t.Fatalf("parallel %d: %v", parallel, err)
		}
		got, _ := os.ReadFile(res.Path)
		if !bytes.Equal(got, data) {
			t.Fatalf("parallel %d: the bytes differ after 3 dropped connections", parallel)
		}
		if h.Ranged == 0 {
			t.Errorf("parallel %d: no Range request", parallel)
		}
	}
	// A partial file left by a killed run is continued from its size.
	h := hubtest.New(t)
	h.Add("dataset", "d/x", "f.bin", data, true, false)
	c := client(t, h, "")
	c.Parallel = 1
	dir := t.TempDir()
	f := File{Repo: "d/x", Type: Dataset, Path: "f.bin"}
	part := filepath.Join(dir, RepoFolder("d/x", Dataset), "blobs", sha256Hex(data)+".incomplete")
	if err := os.MkdirAll(filepath.Dir(part), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(part, data[:20_000], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), f, dir); err != nil {
		t.Fatal(err)
	}
	if h.Ranged != 1 {
		t.Errorf("%d ranged GETs, want 1 (bytes=20000-)", h.Ranged)
	}
}

// Wrong bytes (the sha256 differs from the hub's) are deleted and
// refused; a gated repository without the token is a 401 that says what
// to do; a missing file names EntryNotFound.
func TestRefusals(t *testing.T) {
	h := hubtest.New(t)
	h.Add("dataset", "d/x", "f.bin", blob(5_000, 3), true, false)
	h.Add("model", "meta-llama/Llama-3.2-1B", "tokenizer.json", []byte("{}"), false, true)
	h.Token = "hf_secret"
	h.Corrupt = true
	c := client(t, h, "")
	dir := t.TempDir()
	ctx := context.Background()
	_, err := c.Get(ctx, File{Repo: "d/x", Type: Dataset, Path: "f.bin"}, dir)
	if err == nil || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("corrupt bytes: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*", "blobs", "*")); len(m) != 0 {
		t.Errorf("left behind: %v", m)
	}
	var he *Error
	_, err = c.Get(ctx, File{Repo: "meta-llama/Llama-3.2-1B", Type: Model, Path: "tokenizer.json"}, dir)
	if !errors.As(err, &he) || he.Status != 401 || he.Code != "GatedRepo" || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Errorf("gated without a token: %v", err)
	}
	if _, err := client(t, h, "hf_secret").Get(ctx, File{Repo: "meta-llama/Llama-3.2-1B", Type: Model, Path: "tokenizer.json"}, dir); err != nil {
		t.Errorf("gated with the token: %v", err)
	}
	_, err = c.Get(ctx, File{Repo: "d/x", Type: Dataset, Path: "nope.bin"}, dir)
	if !errors.As(err, &he) || he.Code != "EntryNotFound" {
		t.Errorf("missing file: %v", err)
	}
}

// The token and the cache are found as huggingface_hub finds them.
func TestTokenAndCache(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".cache", "huggingface"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".cache", "huggingface", "token"), []byte("hf_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": home}
	if got := Token(env); got != "hf_file" {
		t.Errorf("token file: %q", got)
	}
	env["HF_TOKEN"] = "hf_env"
	if got := Token(env); got != "hf_env" {
		t.Errorf("HF_TOKEN: %q", got)
	}
	if got := Cache(env); got != filepath.Join(home, ".cache", "huggingface", "hub") {
		t.Errorf("cache %q", got)
	}
	env["HF_HOME"] = "/h"
	if got := Cache(env); got != "/h/hub" {
		t.Errorf("HF_HOME: cache %q", got)
	}
	env["HF_HUB_CACHE"] = "/c"
	if got := Cache(env); got != "/c" {
		t.Errorf("HF_HUB_CACHE: cache %q", got)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
