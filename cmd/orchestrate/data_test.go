package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsearch/hindsearch/clients/hub/hubtest"
)

// data get tokenizer:ORG/NAME puts a model's tokenizer files into the
// Hugging Face cache HF_ENDPOINT serves them from, where policy.tokenizer
// auto finds them; data list names the bundles; an unknown one is an
// error naming them.
func TestDataGetTokenizer(t *testing.T) {
	h := hubtest.New(t)
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		h.Add("model", "Qwen/Qwen3-8B", f, []byte(`{}`), false, false)
	}
	home := t.TempDir()
	env := []string{"HOME=" + home, "HF_ENDPOINT=" + h.URL, "HF_HUB_CACHE=" + filepath.Join(home, "hub")}
	out, _, err := runCLI(t, env, "data", "get", "tokenizer:Qwen/Qwen3-8B", "--dir", filepath.Join(home, "data"))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if m, _ := filepath.Glob(filepath.Join(home, "hub", "models--Qwen--Qwen3-8B", "snapshots", "*", "tokenizer.json")); len(m) != 1 {
		t.Errorf("no tokenizer.json in the cache:\n%s", out)
	}
	out, _, err = runCLI(t, env, "data", "list")
	if err != nil || !strings.Contains(out, "wiki18-e5-flat") || !strings.Contains(out, "tokenizer:ORG/NAME") {
		t.Errorf("list: %v\n%s", err, out)
	}
	if _, _, err := runCLI(t, env, "data", "get", "wiki19"); err == nil || !strings.Contains(err.Error(), "wiki18") {
		t.Errorf("unknown bundle: %v", err)
	}
}
