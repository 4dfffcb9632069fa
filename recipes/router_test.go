package recipes

import (
	"strings"
	"testing"
)

// policy.router_url: a URL, with vLLM policy servers only.
func TestRouterURLKey(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string // "" loads
	}{
		{[]string{"policy.router_url=http://127.0.0.1:30000"}, ""},
		{[]string{"policy.router_url=embedded"}, "policy.router_url: must be the URL of a vllm-router"},
		{[]string{"policy.router_url=127.0.0.1:30000"}, "policy.router_url"},
		{[]string{"policy.router_url=http://127.0.0.1:30000", "policy.server=sglang", "policy.tokenize=local"}, "vllm-router's /generate drops logprob_start_len"},
		{[]string{"policy.router_url=http://127.0.0.1:30000", "policy.server=tinker", "policy.tokenize=local"}, "policy.router_url: not with policy.server tinker"},
	} {
		_, err := Load("sim.yaml", tc.sets, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.sets, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want %q", tc.sets, err, tc.want)
		}
	}
}
