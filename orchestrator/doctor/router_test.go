package doctor

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/router"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/recipes"
)

// The router row compares vllm-router's GET /list_workers with
// policy.urls: a foreign worker fails (trained weights), servers not yet
// listed are fine (the run adds them), an unreachable router fails.
func TestDoctorRouterWorkers(t *testing.T) {
	var listed []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/list_workers" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"urls": listed})
	}))
	defer srv.Close()
	o := transport.DefaultOptions("router", srv.URL)
	o.Retries, o.Timeout = 0, 5*time.Second
	rc, err := router.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var ps []policy.Policy
	for _, u := range []string{"http://127.0.0.1:18001", "http://127.0.0.1:18002"} {
		p, err := policy.New(transport.DefaultOptions("policy", u))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	r := &recipes.Recipe{}
	r.Sync.Kind = recipes.SyncLoRA
	c := newChecker(r, roles.Deps{Policies: ps, RouterAdmin: rc}, nil, 5*time.Second, true)
	for _, tc := range []struct {
		listed []string
		status CheckStatus
		detail string
	}{
		{[]string{"http://127.0.0.1:18001/", "http://127.0.0.1:18002"}, CheckOK, "routes to exactly policy.urls (2 servers)"},
		{[]string{"http://127.0.0.1:18001"}, CheckOK, "lists 1 of 2 policy servers; the run adds http://127.0.0.1:18002"},
		{[]string{"http://127.0.0.1:18001", "http://10.0.0.9:8000"}, CheckFail, "routes to http://10.0.0.9:8000, not in policy.urls"},
	} {
		listed = tc.listed
		ch := c.routerCheck(context.Background(), rc)
		if ch.Role != "router" || ch.Status != tc.status || !strings.Contains(ch.Detail, tc.detail) {
			t.Errorf("listed %v: %+v, want %s with %q", tc.listed, ch, tc.status, tc.detail)
		}
	}
	srv.Close()
	if ch := c.routerCheck(context.Background(), rc); ch.Status != CheckFail || !strings.Contains(ch.Detail, "GET /list_workers") || ch.Fix == "" {
		t.Errorf("router down: %+v", ch)
	}
}
