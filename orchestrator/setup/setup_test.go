package setup

import (
	"testing"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/sglang"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/recipes"
)

// policy.server chooses the policy client Connect builds for each replica.
func TestNewPolicyByPolicyServer(t *testing.T) {
	r := recipes.Defaults()
	o := transport.DefaultOptions("policy", "http://127.0.0.1:1")
	p, err := newPolicy(&r, o, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(*policy.Client); !ok {
		t.Fatalf("policy.server vllm: %T", p)
	}
	r.Policy.Server = recipes.ServerSGLang
	if p, err = newPolicy(&r, o, "", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(*sglang.Client); !ok {
		t.Fatalf("policy.server sglang: %T", p)
	}
	r.Policy.Server = recipes.ServerTinker
	if p, err = newPolicy(&r, o, "", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(*tinker.Client); !ok {
		t.Fatalf("policy.server tinker: %T", p)
	}
	p.(*tinker.Client).Close()
}
