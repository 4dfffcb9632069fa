package setup

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

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

// A policy replica's client can hold policy.concurrency rollout calls and
// judge.concurrency teacher scorings in flight at once, whatever
// http.pool_size says: with the default pool of 64 connections a recipe's
// policy.concurrency 512 ran 64 at a time (source audit C7). The server
// below holds every request until 100 are in flight at once.
func TestPolicyPoolHoldsTheConcurrency(t *testing.T) {
	r := recipes.Defaults()
	r.Policy.Concurrency, r.Judge.Concurrency = 96, 4
	if got := PolicyPoolSize(&r); got != 100 {
		t.Fatalf("pool %d, want 100 (96 + 4 over http.pool_size %d)", got, r.HTTP.PoolSize)
	}
	const n = 100
	var mu sync.Mutex
	inFlight, most := 0, 0
	all := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	o := transport.DefaultOptions("policy", srv.URL)
	o.PoolSize = PolicyPoolSize(&r)
	c, err := transport.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { _ = c.Do(context.Background(), http.MethodPost, "/v1/completions", map[string]any{}, nil) })
	}
	wg.Wait()
	if most != n {
		t.Errorf("at most %d requests in flight, want %d", most, n)
	}
}
