package real_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/hub"
	"github.com/hindsearch/hindsearch/clients/hub/hubtest"
	"github.com/hindsearch/hindsearch/clients/transport"
)

// hubRead is what sim/real/hub_read.py (huggingface_hub itself) read.
type hubRead struct {
	Version string `json:"huggingface_hub"`
	Files   []struct {
		Repo, Type, Revision, Path string
		SHA256                     string `json:"sha256"`
		Missing                    string `json:"missing"`
	} `json:"files"`
	Repos []struct {
		Repo, Type string
		Files      int      `json:"files"`
		Size       int64    `json:"size_on_disk"`
		Refs       []string `json:"refs"`
		Revisions  []string `json:"revisions"`
	} `json:"repos"`
	Warnings []string `json:"warnings"`
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestHubCacheReadsBackWithHuggingfaceHub: the Hugging Face cache that
// `orchestrate data get` writes (here tokenizer:Qwen/Qwen3-8B from a fake
// hub, HF_ENDPOINT) and the hub client's dataset fetches (an LFS file in a
// folder, by branch and by commit) read back with huggingface_hub itself:
// try_to_load_from_cache finds every file, by branch and by commit, with
// the bytes served, and scan_cache_dir sees each repository, its refs and
// its revision, with no warning.
func TestHubCacheReadsBackWithHuggingfaceHub(t *testing.T) {
	st := realStack(t)
	h := hubtest.New(t)
	files := map[string][]byte{
		"tokenizer.json":         randomBytes(40_000, 1),
		"tokenizer_config.json":  []byte(`{"model_max_length": 40960}`),
		"generation_config.json": []byte(`{"eos_token_id": [151645, 151643]}`),
	}
	for name, data := range files {
		h.Add("model", "Qwen/Qwen3-8B", name, data, name == "tokenizer.json", false)
	}
	parquet := randomBytes(300_000, 2)
	h.Add("dataset", "PeterJinGo/nq_hotpotqa_train", "sub/train.parquet", parquet, true, false)
	home := t.TempDir()
	cache := filepath.Join(home, "hub")
	cmd := exec.Command(orchestrate(t), "data", "get", "tokenizer:Qwen/Qwen3-8B", "--dir", filepath.Join(home, "data"), "--progress", "off")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(cmd.Environ(), "HOME="+home, "HF_ENDPOINT="+h.URL, "HF_HUB_CACHE="+cache)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("data get: %v\n%s", err, out)
	}
	o := transport.DefaultOptions("hub", h.URL)
	o.Timeout = time.Minute
	c, err := hub.New(h.URL, "", o)
	if err != nil {
		t.Fatal(err)
	}
	c.MinPart = 1 << 14 // fetched in parallel ranges, as a large file is
	commit := h.Commit("dataset", "PeterJinGo/nq_hotpotqa_train")
	for _, rev := range []string{"main", commit} {
		if _, err := c.Get(context.Background(), hub.File{Repo: "PeterJinGo/nq_hotpotqa_train", Type: hub.Dataset, Revision: rev, Path: "sub/train.parquet"}, cache); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		Repo     string `json:"repo"`
		Type     string `json:"type"`
		Revision string `json:"revision"`
		Path     string `json:"path"`
	}
	ask := []want{{"PeterJinGo/nq_hotpotqa_train", "dataset", "main", "sub/train.parquet"},
		{"PeterJinGo/nq_hotpotqa_train", "dataset", commit, "sub/train.parquet"}}
	for name := range files {
		ask = append(ask, want{"Qwen/Qwen3-8B", "model", "main", name}, want{"Qwen/Qwen3-8B", "model", h.Commit("model", "Qwen/Qwen3-8B"), name})
	}
	arg, _ := json.Marshal(ask)
	out, err := exec.Command(st.Python, filepath.Join(repoRoot(t), "sim", "real", "hub_read.py"), cache, string(arg)).Output()
	if err != nil {
		t.Fatalf("hub_read.py: %v\n%s", err, out)
	}
	var got hubRead
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	t.Logf("huggingface_hub %s read %d files, %d repositories", got.Version, len(got.Files), len(got.Repos))
	for _, f := range got.Files {
		data := files[f.Path]
		if f.Path == "sub/train.parquet" {
			data = parquet
		}
		if f.SHA256 != hexSHA(data) {
			t.Errorf("%s %s@%s: try_to_load_from_cache gave sha256 %q (%s), want %s", f.Repo, f.Path, f.Revision, f.SHA256, f.Missing, hexSHA(data))
		}
	}
	if len(got.Warnings) != 0 {
		t.Errorf("scan_cache_dir warnings: %v", got.Warnings)
	}
	if len(got.Repos) != 2 {
		t.Fatalf("scan_cache_dir repositories: %+v", got.Repos)
	}
	for _, r := range got.Repos {
		wantFiles, wantSize := 3, int64(0)
		for _, d := range files {
			wantSize += int64(len(d))
		}
		if r.Type == "dataset" {
			wantFiles, wantSize = 1, int64(len(parquet))
		}
		if r.Files != wantFiles || r.Size != wantSize || len(r.Revisions) != 1 || len(r.Refs) != 1 || r.Refs[0] != "main" {
			t.Errorf("scan_cache_dir %s %s: %d files, %d bytes, refs %v, revisions %v; want %d files, %d bytes, ref main, one revision",
				r.Type, r.Repo, r.Files, r.Size, r.Refs, r.Revisions, wantFiles, wantSize)
		}
	}
}
