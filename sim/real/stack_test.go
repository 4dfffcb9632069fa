package real_test

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/hindsearch/hindsearch/sim/internal/contracttest"
)

// stack is the real servers `make real` started (sim/real/run.sh), read
// from the environment it sets. Without HINDSEARCH_REAL=1 every test of
// the package skips: `go test ./...` stays offline and fast.
type stack struct {
	// SkyRL is the SkyRL Tinker API server (JAX backend, LoRA).
	SkyRL string
	// VLLM is vLLM for the CPU with runtime LoRA loading (the policy).
	VLLM string
	// Judge is a second vLLM, LoRA off (the judge's chat route).
	Judge string
	// Model is the tiny model's directory; Name the name both vLLMs serve
	// it under (SkyRL's base model is Model).
	Model, Name string
	// Checkpoints is SkyRL's --checkpoints-base.
	Checkpoints string
	// Python runs the SkyRL environment's interpreter (Tinker SDK,
	// huggingface_hub).
	Python string
}

func realStack(t *testing.T) *stack {
	t.Helper()
	if os.Getenv("HINDSEARCH_REAL") != "1" {
		t.Skip("the real servers are not running: make real (sim/real/README.md) sets HINDSEARCH_REAL=1")
	}
	s := &stack{}
	for _, v := range []struct {
		key string
		dst *string
	}{
		{"HINDSEARCH_REAL_SKYRL", &s.SkyRL}, {"HINDSEARCH_REAL_VLLM", &s.VLLM}, {"HINDSEARCH_REAL_JUDGE", &s.Judge},
		{"HINDSEARCH_REAL_MODEL", &s.Model}, {"HINDSEARCH_REAL_NAME", &s.Name},
		{"HINDSEARCH_REAL_CHECKPOINTS", &s.Checkpoints}, {"HINDSEARCH_REAL_PYTHON", &s.Python},
	} {
		*v.dst = os.Getenv(v.key)
		if *v.dst == "" {
			t.Fatalf("HINDSEARCH_REAL=1 but %s is not set (run the tests through make real)", v.key)
		}
	}
	if !filepath.IsAbs(s.Model) {
		t.Fatalf("HINDSEARCH_REAL_MODEL %q: want an absolute path", s.Model)
	}
	return s
}

// proxied serves the real server at target behind the contract suites'
// fault switch on 127.0.0.1: requests are counted and faults armed on the
// way, the rest is the real server's answer.
func proxied(t *testing.T, target string) *contracttest.Switch {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	return contracttest.ServeSwitch(t, rp)
}

var _ = httptest.NewServer
