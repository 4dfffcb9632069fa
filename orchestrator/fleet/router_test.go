package fleet

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/router"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/recipes"
)

// fakeRouter is an httptest vllm-router: the worker-list routes as
// vllm-router 0.1.17 answers them, and /v1/completions answered for the
// member its X-Session-ID hashes to, 404 "does not exist" when that
// member does not list the model (as vLLM answers through the router).
// It records every call.
type fakeRouter struct {
	*httptest.Server
	mu       sync.Mutex
	workers  []string
	calls    []string          // "METHOD path?query"
	sessions map[string]string // session -> worker its requests went to
	// served reports whether worker u serves model (a direct check of
	// the fake replica behind it).
	served func(u, model string) bool
}

func newFakeRouter(t *testing.T, served func(u, model string) bool) *fakeRouter {
	f := &fakeRouter{sessions: map[string]string{}, served: served}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, r.Method+" "+r.URL.RequestURI())
		u := r.URL.Query().Get("url")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/list_workers":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"urls": f.workers})
		case r.Method == http.MethodPost && r.URL.Path == "/add_worker":
			if slices.Contains(f.workers, u) {
				http.Error(w, "Worker "+u+" already exists", http.StatusBadRequest)
				return
			}
			f.workers = append(f.workers, u)
			io.WriteString(w, "Successfully added worker: "+u)
		case r.Method == http.MethodPost && r.URL.Path == "/remove_worker":
			f.workers = slices.DeleteFunc(f.workers, func(x string) bool { return x == u })
			io.WriteString(w, "Successfully removed worker: "+u)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/completions":
			var body struct {
				Model string `json:"model"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			if len(f.workers) == 0 {
				http.Error(w, "No available workers (all circuits open or unhealthy)", http.StatusServiceUnavailable)
				return
			}
			sess := r.Header.Get(policy.SessionHeader)
			h := fnv.New32a()
			io.WriteString(h, sess)
			to := f.workers[int(h.Sum32())%len(f.workers)]
			f.sessions[sess] = to
			if !f.served(to, body.Model) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"object":"error","message":"The model `+"`"+body.Model+"`"+` does not exist.","type":"NotFoundError","code":404}`)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"text":"a","finish_reason":"length","stop_reason":null,"logprobs":{"tokens":["token_id:5"],"token_logprobs":[-0.5],"text_offset":[0]}}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeRouter) members() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.workers))
}

func (f *fakeRouter) clients(t *testing.T) (policy.Policy, router.Router) {
	t.Helper()
	o := transport.DefaultOptions("router", f.URL)
	o.Retries, o.Timeout = 0, 5*time.Second
	pc, err := policy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := router.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	t.Cleanup(rc.Close)
	return pc, rc
}

// In router mode generation goes through the router with the session,
// control calls go to the replicas, and the router's worker list follows
// the weight book: a replica that failed to load the step's adapter is
// out of it until it holds it, a replica drained is out, one re-admitted
// is back.
func TestRouterMembershipFollowsTheBook(t *testing.T) {
	root := t.TempDir()
	ck := filepath.Join(root, "ck")
	ws, reps, servers := newTestSync(t, recipes.SyncLoRA, ck, filepath.Join(root, "adapters"), 3, 2)
	served := func(u, model string) bool {
		for _, s := range servers {
			if s.URL == u {
				s.mu.Lock()
				defer s.mu.Unlock()
				return model == "base" || slices.Contains(s.adapters, model)
			}
		}
		return false
	}
	fr := newFakeRouter(t, served)
	reps.UseRouter(fr.clients(t))
	reps.Affinity = recipes.AffinityTrajectory
	ctx := context.Background()
	if err := reps.SyncRouter(ctx); err != nil {
		t.Fatal(err)
	}
	both := []string{servers[0].URL, servers[1].URL}
	slices.Sort(both)
	if got := fr.members(); !slices.Equal(got, both) {
		t.Fatalf("router workers %v after the first sync, want %v", got, both)
	}

	// Generation through the router, each trajectory its own session;
	// control calls (Call) reach a replica directly.
	complete := func(model, key string) error {
		return reps.CallKey(ctx, model, key, func(p policy.Policy) error {
			_, err := p.Complete(ctx, policy.CompletionRequest{Model: model, Prompt: []int{1, 2}, MaxTokens: 1})
			return err
		})
	}
	for _, k := range []string{"q1-k0", "q1-k1", "q2-k0"} {
		if err := complete("base", k); err != nil {
			t.Fatal(err)
		}
	}
	var direct string
	if err := reps.Call(ctx, func(p policy.Policy) error { direct = p.URL(); return nil }); err != nil || !slices.Contains(both, direct) {
		t.Errorf("Call went to %q (%v), want a replica", direct, err)
	}
	fr.mu.Lock()
	if len(fr.sessions) != 3 || fr.sessions["q1-k0"] == "" {
		t.Errorf("sessions the router saw: %v", fr.sessions)
	}
	fr.mu.Unlock()

	// Replica 1 fails to load n1: out of the router before n1 is used;
	// every request for n1 is served.
	writeSimArchive(t, filepath.Join(ck, "m", "sampler_weights", "n1.tar.gz"))
	servers[1].set(func(s *fakeReplica) { s.failLoads = 1 })
	if err := ws.Apply(ctx, "tinker://m/sampler_weights/n1", "n1"); err != nil {
		t.Fatal(err)
	}
	if got := fr.members(); !slices.Equal(got, []string{servers[0].URL}) {
		t.Errorf("router workers %v after replica 1 failed n1, want only %s", got, servers[0].URL)
	}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := complete("n1", k); err != nil {
			t.Fatalf("n1 through the router: %v", err)
		}
	}
	// The retry before the next rollout loads it: back in the router.
	if err := ws.Ensure(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if got := fr.members(); !slices.Equal(got, both) {
		t.Errorf("router workers %v after replica 1 loaded n1, want %v", got, both)
	}

	// A replica that restarted behind the router (lost its adapters)
	// fails a request the router sent it: the fleet checks the replicas
	// directly, drains it (out of the router) and the request is served;
	// re-admission (which loads n1 again) puts it back.
	reps.Readmit = func(ctx context.Context, p policy.Policy) error { return ws.Restore(ctx, p) }
	servers[0].set(func(s *fakeReplica) { s.adapters = nil })
	servers[1].set(func(s *fakeReplica) { s.adapters = nil })
	servers[1].set(func(s *fakeReplica) { s.failLoads = 1000 }) // stays without n1
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := complete("n1", k); err != nil {
			t.Fatalf("n1 after the restart: %v", err)
		}
	}
	eventually(t, "replica 0 back in the router, replica 1 out", func() bool {
		return slices.Equal(fr.members(), []string{servers[0].URL})
	})
	servers[1].set(func(s *fakeReplica) { s.failLoads = 0 })
	eventually(t, "replica 1 re-admitted and back in the router", func() bool {
		return slices.Equal(fr.members(), both)
	})

	// A worker the run does not know is refused at the start.
	fr.mu.Lock()
	fr.workers = append(fr.workers, "http://127.0.0.1:9")
	fr.mu.Unlock()
	if err := reps.SyncRouter(ctx); err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:9, not among policy.urls") {
		t.Errorf("foreign worker: %v", err)
	}
	// The add and remove calls name the worker in the query, as
	// vllm-router takes it.
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if !slices.Contains(fr.calls, "POST /remove_worker?url="+strings.ReplaceAll(strings.ReplaceAll(servers[1].URL, ":", "%3A"), "/", "%2F")) {
		t.Errorf("no remove_worker call for replica 1 among %v", fr.calls)
	}
}
