package setup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/hub"
)

// policy.tokenizer auto finds policy.model's tokenizer.json in the Hugging
// Face cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)
// at the revision refs/main names, else the only snapshot with one, and
// says which; otherwise the error names the path and the fix.
func TestHFCacheTokenizer(t *testing.T) {
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir()
	repo := filepath.Join(home, ".cache/huggingface/hub/models--Qwen--Qwen2.5-3B-Instruct")
	env := map[string]string{"HOME": home}
	_, _, err := hfCacheTokenizer("Qwen/Qwen2.5-3B-Instruct", env)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(repo, "snapshots", "*", "tokenizer.json")) ||
		!strings.Contains(err.Error(), "huggingface-cli download Qwen/Qwen2.5-3B-Instruct tokenizer.json") ||
		!strings.Contains(err.Error(), "set policy.tokenizer") {
		t.Fatalf("empty cache: %v", err)
	}
	write(filepath.Join(repo, "snapshots/aaa/tokenizer.json"))
	if p, how, err := hfCacheTokenizer("Qwen/Qwen2.5-3B-Instruct", env); err != nil || p != filepath.Join(repo, "snapshots/aaa/tokenizer.json") || !strings.Contains(how, "only snapshot") {
		t.Errorf("one snapshot: %q %q %v", p, how, err)
	}
	write(filepath.Join(repo, "snapshots/bbb/tokenizer.json"))
	if _, _, err := hfCacheTokenizer("Qwen/Qwen2.5-3B-Instruct", env); err == nil || !strings.Contains(err.Error(), "2 snapshots") || !strings.Contains(err.Error(), "no refs/main") {
		t.Errorf("two snapshots, no refs/main: %v", err)
	}
	write(filepath.Join(repo, "refs/main"))
	if err := os.WriteFile(filepath.Join(repo, "refs/main"), []byte("bbb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, how, err := hfCacheTokenizer("Qwen/Qwen2.5-3B-Instruct", env); err != nil || p != filepath.Join(repo, "snapshots/bbb/tokenizer.json") || !strings.Contains(how, "refs/main") {
		t.Errorf("refs/main: %q %q %v", p, how, err)
	}
	// The cache's location: HF_HUB_CACHE, then HF_HOME/hub.
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HOME": home, "HF_HUB_CACHE": "/x/hub", "HF_HOME": "/y"}, "/x/hub"},
		{map[string]string{"HOME": home, "HUGGINGFACE_HUB_CACHE": "/w/hub", "HF_HOME": "/y"}, "/w/hub"},
		{map[string]string{"HOME": home, "HF_HOME": "/y"}, "/y/hub"},
		{map[string]string{"HOME": home, "XDG_CACHE_HOME": "/z"}, "/z/huggingface/hub"},
		{map[string]string{"HOME": home, "HF_HOME": "~/hf"}, filepath.Join(home, "hf/hub")},
		{map[string]string{"HOME": home}, filepath.Join(home, ".cache/huggingface/hub")},
	} {
		if got := hub.Cache(c.env); got != c.want {
			t.Errorf("hub.Cache(%v) = %q, want %q", c.env, got, c.want)
		}
	}
}
