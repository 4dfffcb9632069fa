package fleet

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hindsearch/hindsearch/clients/policy"
	"github.com/hindsearch/hindsearch/clients/policy/tinker"
	"github.com/hindsearch/hindsearch/clients/trainer"
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/recipes"
	"github.com/hindsearch/hindsearch/sim/lm"
	"github.com/hindsearch/hindsearch/sim/weights"
)

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name, body, link string
	typ              byte
}

// writeTarGz writes a gzip tar of entries to path.
func writeTarGz(t *testing.T, path string, entries []tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Linkname: e.link, ModTime: time.Unix(0, 0)}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// simParams are recognisable simulator parameters.
func simParams() lm.Params {
	p := make(lm.Params, lm.NumParams)
	for i := range p {
		p[i] = float64(i) / 4
	}
	return p
}

// writeSimArchive writes a real simulator adapter archive to path.
func writeSimArchive(t *testing.T, path string) {
	t.Helper()
	b, err := weights.AdapterArchive(simParams(), "sim/base", 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func noPartial(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir + ".partial"); !os.IsNotExist(err) {
		t.Errorf("%s.partial left behind (stat: %v)", dir, err)
	}
}

func TestUnpackAdapterSimArchive(t *testing.T) {
	root := t.TempDir()
	archive := filepath.Join(root, "a.tar.gz")
	writeSimArchive(t, archive)
	dir := filepath.Join(root, "adapters", "step1")
	// Previous content is replaced.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stale.bin"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := UnpackAdapter(archive, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != dir {
		t.Errorf("UnpackAdapter = %q, want %q", got, dir)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"adapter_config.json", "adapter_model.safetensors"}) {
		t.Errorf("unpacked %v", names)
	}
	p, err := weights.ReadAdapter(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, simParams()) {
		t.Errorf("params %v, want %v", p, simParams())
	}
	noPartial(t, dir)
}

func TestUnpackAdapterNested(t *testing.T) {
	root := t.TempDir()
	archive := filepath.Join(root, "a.tar.gz")
	writeTarGz(t, archive, []tarEntry{
		{name: "./", typ: tar.TypeDir},
		{name: "./ckpt/", typ: tar.TypeDir},
		{name: "./ckpt/adapter_config.json", body: `{"peft_type":"LORA"}`},
		{name: "./ckpt/adapter_model.safetensors", body: "weights"},
	})
	dir := filepath.Join(root, "out")
	got, err := UnpackAdapter(archive, dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "ckpt"); got != want {
		t.Errorf("UnpackAdapter = %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(got, "adapter_model.safetensors")); err != nil || string(b) != "weights" {
		t.Errorf("adapter_model.safetensors = %q, %v", b, err)
	}
	noPartial(t, dir)

	// Files without their directory entries are fine too.
	writeTarGz(t, archive, []tarEntry{{name: "sub/adapter_config.json", body: "{}"}})
	if got, err := UnpackAdapter(archive, dir); err != nil || got != filepath.Join(dir, "sub") {
		t.Errorf("UnpackAdapter without dir entries = %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ckpt")); !os.IsNotExist(err) {
		t.Error("the previous unpack's files survived")
	}
}

func TestUnpackAdapterRefuses(t *testing.T) {
	cases := []struct {
		name    string
		entries []tarEntry
		want    string
	}{
		{"parent entry", []tarEntry{{name: "adapter_config.json", body: "{}"}, {name: "../evil", body: "x"}}, "escapes"},
		{"inner parent", []tarEntry{{name: "a/../../evil", body: "x"}}, "escapes"},
		{"absolute", []tarEntry{{name: "/tmp/evil", body: "x"}}, "escapes"},
		{"symlink", []tarEntry{{name: "adapter_config.json", typ: tar.TypeSymlink, link: "/etc/passwd"}}, "not a file or directory"},
		{"symlink dir", []tarEntry{{name: "d", typ: tar.TypeSymlink, link: "../.."}, {name: "d/evil", body: "x"}}, "not a file or directory"},
		{"hard link", []tarEntry{{name: "adapter_config.json", typ: tar.TypeLink, link: "../evil"}}, "not a file or directory"},
		{"no config", []tarEntry{{name: "adapter_model.safetensors", body: "w"}}, "no adapter_config.json"},
		{"config too deep", []tarEntry{{name: "a/b/adapter_config.json", body: "{}"}}, "no adapter_config.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			archive := filepath.Join(root, "in", "a.tar.gz")
			writeTarGz(t, archive, c.entries)
			dir := filepath.Join(root, "in", "adapters", "new")
			_, err := UnpackAdapter(archive, dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), archive) {
				t.Fatalf("UnpackAdapter: %v, want an error naming %s and saying %q", err, archive, c.want)
			}
			for _, p := range []string{filepath.Join(root, "in", "adapters", "evil"), filepath.Join(root, "in", "evil"), filepath.Join(root, "evil")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
			noPartial(t, dir)
		})
	}

	// A refused archive leaves the previous adapter in place.
	root := t.TempDir()
	dir := filepath.Join(root, "adapter")
	writeSimArchive(t, filepath.Join(root, "good.tar.gz"))
	if _, err := UnpackAdapter(filepath.Join(root, "good.tar.gz"), dir); err != nil {
		t.Fatal(err)
	}
	writeTarGz(t, filepath.Join(root, "bad.tar.gz"), []tarEntry{{name: "adapter_config.json", body: "{}"}, {name: "../x", body: "x"}})
	if _, err := UnpackAdapter(filepath.Join(root, "bad.tar.gz"), dir); err == nil {
		t.Fatal("bad archive accepted")
	}
	if _, err := weights.ReadAdapter(dir); err != nil {
		t.Errorf("previous adapter damaged: %v", err)
	}
	noPartial(t, dir)
}

func TestUnpackAdapterBrokenArchives(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "out")
	if _, err := UnpackAdapter(filepath.Join(root, "missing.tar.gz"), dir); err == nil || !strings.Contains(err.Error(), "missing.tar.gz") {
		t.Errorf("missing archive: %v", err)
	}
	notGz := filepath.Join(root, "plain.tar.gz")
	if err := os.WriteFile(notGz, []byte("not gzip at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := UnpackAdapter(notGz, dir); err == nil || !strings.Contains(err.Error(), notGz) {
		t.Errorf("not gzip: %v", err)
	}
	noPartial(t, dir)

	// Truncated mid-stream: the gzip header reads, the tar does not.
	good := filepath.Join(root, "good.tar.gz")
	writeSimArchive(t, good)
	b, _ := os.ReadFile(good)
	cut := filepath.Join(root, "cut.tar.gz")
	if err := os.WriteFile(cut, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := UnpackAdapter(cut, dir); err == nil || !strings.Contains(err.Error(), cut) {
		t.Errorf("truncated: %v", err)
	}
	noPartial(t, dir)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a failed first unpack created %s", dir)
	}
}

// fakeReplica is a fake policy server for weight syncs, recording every
// request: vLLM's LoRA routes, SGLang's /update_weights_from_disk and
// /v1/models listing the base model and the loaded adapters. It fails on
// command.
type fakeReplica struct {
	*httptest.Server
	mu       sync.Mutex
	loads    []map[string]any
	unloads  []map[string]any
	updates  []map[string]any
	requests int
	adapters []string
	weights  string // model_path of the last successful update
	// hide keeps adapters out of /v1/models.
	hide bool
	// failLoads makes the next load requests answer 500.
	failLoads int
	// failUpdates makes the next updates fail: SGLang's 400 answer, or
	// with updateOK200 a 200 answer saying success false.
	failUpdates int
	updateOK200 bool
}

// sglangMessage is the message of a failed fake update.
const sglangMessage = "Failed to get weights iterator: injected failure."

func newFakeReplica(t *testing.T) *fakeReplica {
	s := &fakeReplica{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests++
		var body map[string]any
		if r.Method == http.MethodPost {
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, "bad json", http.StatusBadRequest)
				return
			}
		}
		answer := func(status int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(v)
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/load_lora_adapter":
			s.loads = append(s.loads, body)
			if s.failLoads > 0 {
				s.failLoads--
				http.Error(w, "engine dead", http.StatusInternalServerError)
				return
			}
			s.adapters = append(s.adapters, body["lora_name"].(string))
			io.WriteString(w, "Success: LoRA adapter loaded.")
		case r.Method == http.MethodPost && r.URL.Path == "/v1/unload_lora_adapter":
			s.unloads = append(s.unloads, body)
			name, _ := body["lora_name"].(string)
			s.adapters = slices.DeleteFunc(s.adapters, func(a string) bool { return a == name })
			io.WriteString(w, "Success: LoRA adapter unloaded.")
		case r.Method == http.MethodPost && r.URL.Path == "/update_weights_from_disk":
			s.updates = append(s.updates, body)
			if s.failUpdates > 0 {
				s.failUpdates--
				status := http.StatusBadRequest
				if s.updateOK200 {
					status = http.StatusOK
				}
				answer(status, map[string]any{"success": false, "message": sglangMessage, "num_paused_requests": 0})
				return
			}
			s.weights, _ = body["model_path"].(string)
			answer(http.StatusOK, map[string]any{"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": 0})
		case r.Method == http.MethodGet && r.URL.Path == "/health":
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
			data := []map[string]any{{"id": "base", "object": "model"}}
			if !s.hide {
				for _, a := range s.adapters {
					data = append(data, map[string]any{"id": a, "object": "model", "parent": "base"})
				}
			}
			answer(http.StatusOK, map[string]any{"object": "list", "data": data})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *fakeReplica) client(t *testing.T) policy.Policy {
	t.Helper()
	o := transport.DefaultOptions("policy", s.URL)
	o.Retries = 0
	o.Timeout = 5 * time.Second
	c, err := policy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// set runs f under the server's lock.
func (s *fakeReplica) set(f func(s *fakeReplica)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// syncRecipe is the part of a recipe a weight sync reads.
func syncRecipe(kind, ck, dir string, keep int) *recipes.Recipe {
	r := &recipes.Recipe{}
	r.Policy.Model = "base"
	r.Sync.Kind, r.Sync.Dir, r.Sync.Keep = kind, dir, keep
	r.Trainer.CheckpointsDir = ck
	return r
}

// newTestSync builds the sync of kind over fresh fake replicas.
func newTestSync(t *testing.T, kind, ck, dir string, keep, n int) (Sync, *Replicas, []*fakeReplica) {
	t.Helper()
	var servers []*fakeReplica
	var ps []policy.Policy
	for range n {
		s := newFakeReplica(t)
		servers = append(servers, s)
		ps = append(ps, s.client(t))
	}
	reps := New(ps)
	ws, err := NewSync(syncRecipe(kind, ck, dir, keep), reps)
	if err != nil {
		t.Fatal(err)
	}
	return ws, reps, servers
}

// pickedFor lists the replicas (by index) that n requests needing model
// go to, each held while the next is placed, so that balancing spreads
// them over every replica that qualifies.
func pickedFor(t *testing.T, reps *Replicas, model string, n int) []int {
	t.Helper()
	var got []int
	for range n {
		i, _, ok := reps.acquireFor(model, "")
		if !ok {
			t.Fatalf("no replica acquired for %s", model)
		}
		got = append(got, i)
	}
	for _, i := range got {
		reps.release(i)
	}
	slices.Sort(got)
	return slices.Compact(got)
}

func TestLoRASyncApply(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(root, "checkpoints")
	// Relative sync.dir: lora_path must be absolute.
	ws, reps, servers := newTestSync(t, recipes.SyncLoRA, ck, "adapters", 2, 2)
	s := ws.(*loraSync)
	ctx := context.Background()

	names := []string{"run-step0001", "run-step0002", "run-step0003"}
	for i, name := range names {
		writeSimArchive(t, filepath.Join(ck, "model-7", "sampler_weights", name+".tar.gz"))
		if err := s.Apply(ctx, "tinker://model-7/sampler_weights/"+name, name); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
		// Under the trainer model that saved it: a later model's save of
		// the same name is another path, which vLLM's prefix cache keys.
		abs := filepath.Join(wd, "adapters", "model-7", name)
		for k, srv := range servers {
			srv.mu.Lock()
			got := srv.loads[i]
			srv.mu.Unlock()
			if want := map[string]any{"lora_name": name, "lora_path": abs}; !reflect.DeepEqual(got, want) {
				t.Errorf("server %d load body %v, want exactly %v", k, got, want)
			}
			if !reps.book.has(k, name) {
				t.Errorf("the book says replica %d lacks %s", k, name)
			}
		}
		if _, err := weights.ReadAdapter(abs); err != nil {
			t.Errorf("adapter %s not unpacked at %s: %v", name, abs, err)
		}
		noPartial(t, abs)
		// Requests for the adapter go to both replicas, by its own name.
		if got := pickedFor(t, reps, name, 4); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("requests for %s went to %v", name, got)
		}
		if reps.Wire(name) != name {
			t.Errorf("wire(%s) = %s", name, reps.Wire(name))
		}
	}
	for k, srv := range servers {
		srv.mu.Lock()
		unloads, adapters, nLoads, updates := srv.unloads, srv.adapters, len(srv.loads), len(srv.updates)
		srv.mu.Unlock()
		if nLoads != 3 || updates != 0 {
			t.Errorf("server %d: %d loads, %d weight updates; want 3 and 0", k, nLoads, updates)
		}
		// Each new name is unloaded before its load (a stale adapter of
		// that name from an earlier run would otherwise be kept), then the
		// one beyond sync.keep.
		if want := []map[string]any{{"lora_name": "run-step0001"}, {"lora_name": "run-step0002"}, {"lora_name": "run-step0003"},
			{"lora_name": "run-step0001"}}; !reflect.DeepEqual(unloads, want) {
			t.Errorf("server %d unload bodies %v, want exactly %v", k, unloads, want)
		}
		if want := []string{"run-step0002", "run-step0003"}; !slices.Equal(adapters, want) {
			t.Errorf("server %d serves %v, want %v", k, adapters, want)
		}
		if reps.book.has(k, "run-step0001") {
			t.Errorf("the book says replica %d holds the unloaded adapter", k)
		}
	}
	if _, err := os.Stat(filepath.Join(wd, "adapters", "model-7", "run-step0001")); !os.IsNotExist(err) {
		t.Error("the unloaded adapter's directory is still there")
	}
	if !slices.Equal(s.order, []string{"run-step0002", "run-step0003"}) {
		t.Errorf("kept = %v", s.order)
	}
	// An unloaded adapter is served by no replica: a request for it fails
	// at once, naming each replica.
	err = reps.CallFor(ctx, "run-step0001", func(policy.Policy) error { t.Error("called"); return nil })
	if err == nil || !strings.Contains(err.Error(), "no policy replica holds weights run-step0001") ||
		!strings.Contains(err.Error(), servers[0].URL) || !strings.Contains(err.Error(), servers[1].URL) {
		t.Errorf("request for an unloaded adapter: %v", err)
	}
	// The same name saved by another trainer model (a rerun with
	// --overwrite, a resume) is loaded from another path: vLLM keys its
	// prefix cache by name and path, and would otherwise reuse KV computed
	// with the first model's weights. The first model's copy goes.
	writeSimArchive(t, filepath.Join(ck, "model-8", "sampler_weights", "run-step0003.tar.gz"))
	if err := s.Apply(ctx, "tinker://model-8/sampler_weights/run-step0003", "run-step0003"); err != nil {
		t.Fatal(err)
	}
	servers[0].mu.Lock()
	last := servers[0].loads[len(servers[0].loads)-1]
	servers[0].mu.Unlock()
	if want := filepath.Join(wd, "adapters", "model-8", "run-step0003"); last["lora_path"] != want {
		t.Errorf("reload of run-step0003 from model-8: lora_path %v, want %s", last["lora_path"], want)
	}
	if _, err := os.Stat(filepath.Join(wd, "adapters", "model-7", "run-step0003")); !os.IsNotExist(err) {
		t.Error("model-7's copy of run-step0003 is still there")
	}
}

func TestLoRASyncApplyNestedAndErrors(t *testing.T) {
	root := t.TempDir()
	ck := filepath.Join(root, "ck")
	ws, _, servers := newTestSync(t, recipes.SyncLoRA, ck, filepath.Join(root, "adapters"), 1, 1)
	s, srv := ws.(*loraSync), servers[0]
	ctx := context.Background()

	writeTarGz(t, filepath.Join(ck, "m", "sampler_weights", "n1.tar.gz"), []tarEntry{
		{name: "n1/adapter_config.json", body: "{}"}, {name: "n1/adapter_model.safetensors", body: "w"},
	})
	if err := s.Apply(ctx, "tinker://m/sampler_weights/n1", "n1"); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	got := srv.loads[0]["lora_path"]
	srv.mu.Unlock()
	if want := filepath.Join(root, "adapters", "m", "n1", "n1"); got != want {
		t.Errorf("lora_path %v, want the nested adapter dir %s", got, want)
	}

	// A bad tinker path, a missing archive: errors, nothing sent.
	if err := s.Apply(ctx, "tinker://../x", "n2"); err == nil || !strings.HasPrefix(err.Error(), "sync: ") {
		t.Errorf("bad path: %v", err)
	}
	if err := s.Apply(ctx, "tinker://m/sampler_weights/none", "n2"); err == nil || !strings.Contains(err.Error(), "none.tar.gz") {
		t.Errorf("missing archive: %v", err)
	}
	srv.mu.Lock()
	if len(srv.loads) != 1 {
		t.Errorf("%d loads after failed syncs, want 1", len(srv.loads))
	}
	srv.mu.Unlock()

	// The server accepts the load but does not list the adapter.
	writeSimArchive(t, filepath.Join(ck, "m", "sampler_weights", "n3.tar.gz"))
	srv.set(func(s *fakeReplica) { s.hide = true })
	if err := s.Apply(ctx, "tinker://m/sampler_weights/n3", "n3"); err == nil ||
		!strings.Contains(err.Error(), "no policy replica holds weights n3: "+srv.URL+": failed to load them: ") ||
		!strings.Contains(err.Error(), "does not list adapter n3 after loading it three times") {
		t.Errorf("unlisted adapter: %v", err)
	}
	// The server refuses the load.
	srv.set(func(s *fakeReplica) { s.hide, s.failLoads = false, 1 })
	if err := s.Apply(ctx, "tinker://m/sampler_weights/n3", "n3"); err == nil ||
		!strings.Contains(err.Error(), "load adapter n3 on "+srv.URL) || !strings.Contains(err.Error(), "status 500") {
		t.Errorf("refused load: %v", err)
	}
	if !slices.Equal(s.order, []string{"n1"}) {
		t.Errorf("kept = %v after failed syncs, want [n1]", s.order)
	}
	srv.mu.Lock()
	// Only the names being loaded were cleared first; no kept adapter was
	// unloaded.
	if want := []map[string]any{{"lora_name": "n1"}, {"lora_name": "n3"}, {"lora_name": "n3"}}; !reflect.DeepEqual(srv.unloads, want) {
		t.Errorf("failed syncs unloaded %v, want %v", srv.unloads, want)
	}
	srv.mu.Unlock()
}

// A replica that fails to load an adapter is left out of the requests for
// it, is tried again by ensure and at the next sync, and rejoins once it
// holds it; the base model stays served by both.
func TestLoRASyncReplicaFailsThenRejoins(t *testing.T) {
	root := t.TempDir()
	ck := filepath.Join(root, "ck")
	ws, reps, servers := newTestSync(t, recipes.SyncLoRA, ck, filepath.Join(root, "adapters"), 3, 2)
	ctx := context.Background()
	for _, n := range []string{"n1", "n2", "n3"} {
		writeSimArchive(t, filepath.Join(ck, "m", "sampler_weights", n+".tar.gz"))
	}
	servers[1].set(func(s *fakeReplica) { s.failLoads = 2 })
	if err := ws.Apply(ctx, "tinker://m/sampler_weights/n1", "n1"); err != nil {
		t.Fatalf("one replica holding the adapter is enough: %v", err)
	}
	if got := pickedFor(t, reps, "n1", 6); !slices.Equal(got, []int{0}) {
		t.Errorf("requests for n1 went to %v, want only replica 0", got)
	}
	if got := pickedFor(t, reps, "base", 6); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("requests for the base model went to %v, want both", got)
	}
	var called []string
	if err := reps.CallFor(ctx, "n1", func(p policy.Policy) error { called = append(called, p.URL()); return nil }); err != nil ||
		!slices.Equal(called, []string{servers[0].URL}) {
		t.Errorf("callFor n1: %v on %v", err, called)
	}
	// Retried before the next rollout: still failing, still left out.
	if err := ws.Ensure(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if got := pickedFor(t, reps, "n1", 6); !slices.Equal(got, []int{0}) {
		t.Errorf("after a failed retry requests for n1 went to %v", got)
	}
	// The next retry loads it: replica 1 rejoins.
	if err := ws.Ensure(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if got := pickedFor(t, reps, "n1", 6); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("after loading, requests for n1 went to %v", got)
	}
	servers[1].mu.Lock()
	loads := slices.Clone(servers[1].loads)
	servers[1].mu.Unlock()
	if want := slices.Repeat([]map[string]any{{"lora_name": "n1", "lora_path": filepath.Join(root, "adapters", "m", "n1")}}, 3); !reflect.DeepEqual(loads, want) {
		t.Errorf("replica 1 load bodies %v, want %v", loads, want)
	}

	// A sync point retries kept adapters a replica lacks: n2 fails on
	// replica 1, and n3's sync loads both n2 and n3 there.
	servers[1].set(func(s *fakeReplica) { s.failLoads = 1 })
	if err := ws.Apply(ctx, "tinker://m/sampler_weights/n2", "n2"); err != nil {
		t.Fatal(err)
	}
	if err := ws.Apply(ctx, "tinker://m/sampler_weights/n3", "n3"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if got := pickedFor(t, reps, n, 6); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("requests for %s went to %v", n, got)
		}
	}

	// No replica loads it: the sync fails, naming each replica and why.
	writeSimArchive(t, filepath.Join(ck, "m", "sampler_weights", "n4.tar.gz"))
	for _, s := range servers {
		s.set(func(s *fakeReplica) { s.failLoads = 1 })
	}
	err := ws.Apply(ctx, "tinker://m/sampler_weights/n4", "n4")
	for _, want := range []string{"no policy replica holds weights n4", servers[0].URL + ": failed to load them: load adapter n4 on " + servers[0].URL,
		servers[1].URL + ": failed to load them: ", "engine dead"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no replica loads: %v lacks %q", err, want)
		}
	}
	if got := ws.(*loraSync).order; !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Errorf("kept %v after a failed sync", got)
	}
}

// A drained replica is re-admitted holding the adapters in use, whatever it
// lost in a restart.
func TestLoRASyncRestore(t *testing.T) {
	root := t.TempDir()
	ck := filepath.Join(root, "ck")
	ws, reps, servers := newTestSync(t, recipes.SyncLoRA, ck, filepath.Join(root, "adapters"), 2, 2)
	ctx := context.Background()
	for _, n := range []string{"n1", "n2"} {
		writeSimArchive(t, filepath.Join(ck, "m", "sampler_weights", n+".tar.gz"))
		if err := ws.Apply(ctx, "tinker://m/sampler_weights/"+n, n); err != nil {
			t.Fatal(err)
		}
	}
	// Replica 1 restarted: it lists n2 only (n1 lost).
	servers[1].set(func(s *fakeReplica) { s.adapters = []string{"n2"}; s.loads = nil })
	if err := ws.Restore(ctx, reps.Policy(1)); err != nil {
		t.Fatal(err)
	}
	servers[1].mu.Lock()
	loads := servers[1].loads
	servers[1].mu.Unlock()
	if want := []map[string]any{{"lora_name": "n1", "lora_path": filepath.Join(root, "adapters", "m", "n1")}}; !reflect.DeepEqual(loads, want) {
		t.Errorf("restore loaded %v, want %v", loads, want)
	}
	for _, n := range []string{"base", "n1", "n2"} {
		if !reps.book.has(1, n) {
			t.Errorf("after restore the book says replica 1 lacks %s", n)
		}
	}
	// A replica that cannot load them stays out.
	servers[1].set(func(s *fakeReplica) { s.adapters = nil; s.failLoads = 1 })
	if err := ws.Restore(ctx, reps.Policy(1)); err == nil || !strings.Contains(err.Error(), "reload: load adapter n1 on "+servers[1].URL) {
		t.Errorf("failed restore: %v", err)
	}
	if reps.book.has(1, "n1") || reps.book.has(1, "n2") || !reps.book.has(1, "base") {
		t.Errorf("after a failed restore replica 1 holds %v", reps.book.holdsNames(1))
	}
}

// writeMergedArchive writes a Hugging Face-shaped merged model archive
// (config.json, model.safetensors holding simulator parameters, tokenizer
// files), nested one level, as SkyRL's full fine-tuning backends save.
func writeMergedArchive(t *testing.T, path string) {
	t.Helper()
	st, err := weights.EncodeSafetensors(simParams())
	if err != nil {
		t.Fatal(err)
	}
	writeTarGz(t, path, []tarEntry{
		{name: "merged/", typ: tar.TypeDir},
		{name: "merged/config.json", body: `{"architectures":["Qwen2ForCausalLM"]}`},
		{name: "merged/model.safetensors", body: string(st)},
		{name: "merged/tokenizer.json", body: "{}"},
	})
}

func TestUnpackModel(t *testing.T) {
	root := t.TempDir()
	merged := filepath.Join(root, "merged.tar.gz")
	writeMergedArchive(t, merged)
	got, err := UnpackModel(merged, filepath.Join(root, "out1"))
	if err != nil || got != filepath.Join(root, "out1", "merged") {
		t.Fatalf("UnpackModel(merged) = %q, %v", got, err)
	}
	if p, err := weights.ReadWeights(got); err != nil || !reflect.DeepEqual(p, simParams()) {
		t.Errorf("merged weights: %v, %v", p, err)
	}
	// The simulated trainer's archive: its safetensors file marks the dir.
	simArc := filepath.Join(root, "sim.tar.gz")
	writeSimArchive(t, simArc)
	if got, err := UnpackModel(simArc, filepath.Join(root, "out2")); err != nil || got != filepath.Join(root, "out2") {
		t.Errorf("UnpackModel(sim) = %q, %v", got, err)
	}
	empty := filepath.Join(root, "empty.tar.gz")
	writeTarGz(t, empty, []tarEntry{{name: "README", body: "x"}})
	if _, err := UnpackModel(empty, filepath.Join(root, "out3")); err == nil || !strings.Contains(err.Error(), "weights archive "+empty+": no model") {
		t.Errorf("no model: %v", err)
	}
	bad := filepath.Join(root, "bad.tar.gz")
	writeTarGz(t, bad, []tarEntry{{name: "config.json", body: "{}"}, {name: "../evil", body: "x"}})
	if _, err := UnpackModel(bad, filepath.Join(root, "out4")); err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Errorf("escaping entry: %v", err)
	}
	noPartial(t, filepath.Join(root, "out4"))
}

// sglangPath is the model_path an sglang_disk sync sends for name.
func sglangPath(root, name string) string { return filepath.Join(root, "weights", name) }

func TestSGLangSync(t *testing.T) {
	root := t.TempDir()
	ck := filepath.Join(root, "ck")
	ws, reps, servers := newTestSync(t, recipes.SyncSGLangDisk, ck, filepath.Join(root, "weights"), 1, 2)
	s := ws.(*sglangSync)
	ctx := context.Background()
	apply := func(name string) error {
		writeSimArchive(t, filepath.Join(ck, "m", "sampler_weights", name+".tar.gz"))
		return ws.Apply(ctx, "tinker://m/sampler_weights/"+name, name)
	}
	updates := func(k int) []map[string]any {
		servers[k].mu.Lock()
		defer servers[k].mu.Unlock()
		return slices.Clone(servers[k].updates)
	}
	onDisk := func() []string {
		ents, _ := os.ReadDir(filepath.Join(root, "weights"))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	body := func(name string) map[string]any { return sglangBody(sglangPath(root, name)) }

	if err := apply("run-step0001"); err != nil {
		t.Fatal(err)
	}
	for k := range servers {
		if got, want := updates(k), []map[string]any{body("run-step0001")}; !reflect.DeepEqual(got, want) {
			t.Errorf("server %d update bodies %v, want exactly %v", k, got, want)
		}
		if !reps.book.has(k, "run-step0001") || reps.book.has(k, "base") {
			t.Errorf("replica %d holds %v", k, reps.book.holdsNames(k))
		}
	}
	if p, err := weights.ReadWeights(sglangPath(root, "run-step0001")); err != nil || !reflect.DeepEqual(p, simParams()) {
		t.Errorf("unpacked weights: %v, %v", p, err)
	}
	// Requests name the base model whatever the version; other names pass.
	if reps.Wire("run-step0001") != "base" || reps.Wire("base") != "base" || reps.Wire("teacher-7b") != "teacher-7b" {
		t.Errorf("wire: %q %q %q", reps.Wire("run-step0001"), reps.Wire("base"), reps.Wire("teacher-7b"))
	}
	// The initial weights are gone from every replica.
	if err := reps.CallFor(ctx, "base", func(policy.Policy) error { return nil }); err == nil ||
		!strings.Contains(err.Error(), "no policy replica holds weights base: "+servers[0].URL+": holds run-step0001") {
		t.Errorf("request for the replaced base weights: %v", err)
	}
	if got := pickedFor(t, reps, "teacher-7b", 4); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("untracked model went to %v", got)
	}

	// keep 1: the previous directory goes.
	if err := apply("run-step0002"); err != nil {
		t.Fatal(err)
	}
	if got := onDisk(); !slices.Equal(got, []string{"run-step0002"}) {
		t.Errorf("on disk %v, want [run-step0002]", got)
	}

	// Replica 1 refuses step 3 (SGLang's 400): it is left out of step 3's
	// requests, and the directory it was last loaded from stays.
	servers[1].set(func(s *fakeReplica) { s.failUpdates = 1 })
	if err := apply("run-step0003"); err != nil {
		t.Fatalf("one replica holding the weights is enough: %v", err)
	}
	if got := pickedFor(t, reps, "run-step0003", 6); !slices.Equal(got, []int{0}) {
		t.Errorf("requests for step 3 went to %v, want replica 0 only", got)
	}
	if reps.book.has(1, "run-step0002") {
		t.Error("after a failed load replica 1 still counts as holding step 2")
	}
	if got := onDisk(); !slices.Equal(got, []string{"run-step0002", "run-step0003"}) {
		t.Errorf("on disk %v: the directory replica 1 was last loaded from must stay", got)
	}
	if err := reps.missing("run-step0003"); !strings.Contains(err.Error(), servers[1].URL+": failed to load them: load weights run-step0003 on "+servers[1].URL) ||
		!strings.Contains(err.Error(), sglangMessage) {
		t.Errorf("missing: %v", err)
	}
	// Retried before the next rollout: a 200 saying success false is a
	// failure too; the next retry succeeds and replica 1 rejoins.
	servers[1].set(func(s *fakeReplica) { s.failUpdates, s.updateOK200 = 1, true })
	if err := ws.Ensure(ctx, "run-step0003"); err != nil {
		t.Fatal(err)
	}
	if got := pickedFor(t, reps, "run-step0003", 6); !slices.Equal(got, []int{0}) {
		t.Errorf("after a failed retry requests went to %v", got)
	}
	if err := ws.Ensure(ctx, "run-step0003"); err != nil {
		t.Fatal(err)
	}
	if got := pickedFor(t, reps, "run-step0003", 6); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("after loading requests went to %v, want both", got)
	}
	if got, want := updates(1), []map[string]any{body("run-step0001"), body("run-step0002"), body("run-step0003"), body("run-step0003"), body("run-step0003")}; !reflect.DeepEqual(got, want) {
		t.Errorf("replica 1 update bodies %v, want %v", got, want)
	}
	if got, want := updates(0), []map[string]any{body("run-step0001"), body("run-step0002"), body("run-step0003")}; !reflect.DeepEqual(got, want) {
		t.Errorf("replica 0 update bodies %v, want %v (ensure loads only where lacking)", got, want)
	}
	// ensure of what every replica holds sends nothing.
	if err := ws.Ensure(ctx, "run-step0003"); err != nil || len(updates(0)) != 3 || len(updates(1)) != 5 {
		t.Errorf("ensure with nothing lacking: %v, %d and %d updates", err, len(updates(0)), len(updates(1)))
	}
	if err := apply("run-step0004"); err != nil {
		t.Fatal(err)
	}
	if got := onDisk(); !slices.Equal(got, []string{"run-step0004"}) {
		t.Errorf("on disk %v, want [run-step0004]", got)
	}

	// Neither replica loads step 5: the sync fails naming both and why,
	// its directory goes and step 4 stays in use.
	for _, srv := range servers {
		srv.set(func(s *fakeReplica) { s.failUpdates, s.updateOK200 = 1, false })
	}
	err := apply("run-step0005")
	for _, want := range []string{"sync: no policy replica holds weights run-step0005: ", servers[0].URL + ": failed to load them: ",
		servers[1].URL + ": failed to load them: ", "refused (status 400): " + sglangMessage} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no replica loads: %v lacks %q", err, want)
		}
	}
	if got := onDisk(); !slices.Equal(got, []string{"run-step0004"}) || !slices.Equal(s.order, []string{"run-step0004"}) {
		t.Errorf("after a failed sync: on disk %v, kept %v", got, s.order)
	}
	// No LoRA route was ever used.
	for k, srv := range servers {
		srv.mu.Lock()
		if len(srv.loads)+len(srv.unloads) != 0 {
			t.Errorf("server %d got LoRA requests", k)
		}
		srv.mu.Unlock()
	}
}

// A drained replica is re-admitted with the weights in use loaded again; a
// resumed run loads only its last weights.
func TestSGLangSyncRestoreAndResume(t *testing.T) {
	root := t.TempDir()
	ck := filepath.Join(root, "ck")
	ws, reps, servers := newTestSync(t, recipes.SyncSGLangDisk, ck, filepath.Join(root, "weights"), 2, 2)
	ctx := context.Background()
	// Before any sync: nothing to load, the replica holds the base.
	if err := ws.Restore(ctx, reps.Policy(1)); err != nil || !reps.book.has(1, "base") || len(servers[1].updates) != 0 {
		t.Fatalf("restore before any sync: %v, %d updates", err, len(servers[1].updates))
	}
	samplers := map[string]string{}
	for _, n := range []string{"r-step0001", "r-step0002"} {
		writeMergedArchive(t, filepath.Join(ck, "m", "sampler_weights", n+".tar.gz"))
		samplers[n] = "tinker://m/sampler_weights/" + n
	}
	if err := ws.Resume(ctx, []string{"r-step0001", "r-step0002"}, samplers); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{sglangBody(filepath.Join(sglangPath(root, "r-step0002"), "merged"))}
	for k, srv := range servers {
		if !reflect.DeepEqual(srv.updates, want) {
			t.Errorf("server %d resume updates %v, want %v", k, srv.updates, want)
		}
	}
	if err := ws.Restore(ctx, reps.Policy(0)); err != nil {
		t.Fatal(err)
	}
	if got := servers[0].updates; len(got) != 2 || !reflect.DeepEqual(got[1], want[0]) {
		t.Errorf("restore updates %v", got)
	}
	servers[0].set(func(s *fakeReplica) { s.failUpdates = 1 })
	if err := ws.Restore(ctx, reps.Policy(0)); err == nil || !strings.Contains(err.Error(), sglangMessage) {
		t.Errorf("failed restore: %v", err)
	}
	if reps.book.has(0, "r-step0002") {
		t.Error("a replica whose restore failed counts as holding the weights")
	}
	// A PEFT adapter refused by a real SGLang: the error says why.
	if h := peftHint(filepath.Join(root, "weights", "r-step0002", "merged")); h != "" {
		t.Errorf("merged model hinted %q", h)
	}
	adapter := filepath.Join(root, "adapter")
	if _, err := UnpackAdapter(writeArchiveFile(t, root), adapter); err != nil {
		t.Fatal(err)
	}
	if h := peftHint(adapter); !strings.Contains(h, "holds a PEFT adapter") {
		t.Errorf("adapter hint %q", h)
	}
	// SkyRL's FSDP export of a LoRA model: the adapter beside the base
	// model's config.json.
	if err := os.WriteFile(filepath.Join(adapter, "config.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if h := peftHint(adapter); !strings.Contains(h, "holds a PEFT adapter") {
		t.Errorf("adapter with config.json hint %q", h)
	}
}

// writeArchiveFile writes a simulator adapter archive under root.
func writeArchiveFile(t *testing.T, root string) string {
	t.Helper()
	p := filepath.Join(root, "adapter.tar.gz")
	writeSimArchive(t, p)
	return p
}

// sync.kind none makes no request at all, and refuses to serve weights.
func TestNoneSyncMakesNoCalls(t *testing.T) {
	root := t.TempDir()
	ws, reps, servers := newTestSync(t, recipes.SyncNone, root, root, 0, 1)
	r := syncRecipe(recipes.SyncNone, root, root, 0)
	r.Train.Steps = 3
	if _, err := NewSync(r, New([]policy.Policy{reps.Policy(0)})); err == nil || !strings.Contains(err.Error(), "sync.kind") {
		t.Errorf("none with training steps: %v", err)
	}
	ctx := context.Background()
	if err := ws.Apply(ctx, "tinker://m/sampler_weights/x", "x"); err == nil || !strings.Contains(err.Error(), "sync.kind none") {
		t.Errorf("apply: %v", err)
	}
	if err := ws.Ensure(ctx, "base"); err != nil {
		t.Error(err)
	}
	if err := ws.Restore(ctx, reps.Policy(0)); err != nil {
		t.Error(err)
	}
	if err := ws.Resume(ctx, nil, nil); err != nil {
		t.Error(err)
	}
	if err := ws.Resume(ctx, []string{"x"}, nil); err == nil {
		t.Error("resume of trained weights accepted")
	}
	if reps.book != nil || reps.Wire("base") != "base" {
		t.Error("none keeps a book")
	}
	servers[0].mu.Lock()
	defer servers[0].mu.Unlock()
	if servers[0].requests != 0 {
		t.Errorf("%d requests with sync.kind none", servers[0].requests)
	}
}

func TestNewWeightSyncRefuses(t *testing.T) {
	reps := New([]policy.Policy{&fakePolicy{url: "a"}})
	r := syncRecipe(recipes.SyncSGLangDisk, "ck", "w", 1)
	r.Train.MaxOffPolicySteps = 1
	if _, err := NewSync(r, reps); err == nil || !strings.Contains(err.Error(), "train.max_off_policy_steps must be 0") {
		t.Errorf("off-policy sglang_disk: %v", err)
	}
	r = syncRecipe(recipes.SyncSGLangDisk, "ck", "w", 1)
	r.Hindsight.Enabled, r.Hindsight.Loss, r.Hindsight.Teacher = true, recipes.HindsightLossClamp, recipes.TeacherInitial
	if _, err := NewSync(r, reps); err == nil || !strings.Contains(err.Error(), "hindsight.teacher initial") {
		t.Errorf("initial teacher with sglang_disk: %v", err)
	}
	r.Reference.URLs = []string{"http://127.0.0.1:1"} // they score the teacher
	if _, err := NewSync(r, reps); err != nil {
		t.Errorf("initial teacher on reference servers with sglang_disk: %v", err)
	}
	r = syncRecipe("nccl", "ck", "w", 1)
	if _, err := NewSync(r, reps); err == nil || !strings.Contains(err.Error(), `sync.kind "nccl"`) {
		t.Errorf("unknown kind: %v", err)
	}
}

func TestSampledBy(t *testing.T) {
	var none *SampledBy
	none.Note("a", "m") // a nil record records nothing
	if none.Snapshot() != nil || (&SampledBy{}).Snapshot() != nil {
		t.Error("empty record not nil")
	}
	s := &SampledBy{}
	s.Note("http://a", "step1")
	s.Note("http://b", "step1")
	s.Note("http://a", "step1")
	if got, want := s.Snapshot(), map[string]string{"http://a": "step1", "http://b": "step1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("snapshot %v, want %v", got, want)
	}
	s.Note("http://a", "base")
	if got := s.Snapshot()["http://a"]; got != "base,step1" {
		t.Errorf("two models on one replica: %q", got)
	}
}

// sglangBody is the exact /update_weights_from_disk body of a load of path:
// every field that decides the load is sent.
func sglangBody(path string) map[string]any {
	return map[string]any{"model_path": path, "load_format": "auto", "abort_all_requests": false}
}

// A tinker:// --checkpoint is served through a sampling session over the
// path; a non-Tinker replica refuses it (it loads directories).
func TestServeCheckpointTinkerPath(t *testing.T) {
	r := recipes.Defaults()
	p := &loadRecorder{}
	name, err := ServeCheckpoint(context.Background(), &r, []policy.Policy{p}, "tinker://model-1/sampler_weights/run-step0004")
	if err != nil {
		t.Fatal(err)
	}
	if name != "model-1_sampler_weights_run-step0004" || len(p.loads) != 1 || p.loads[0] != [2]string{name, "tinker://model-1/sampler_weights/run-step0004"} {
		t.Errorf("name %q, loads %v", name, p.loads)
	}
}

// loadRecorder is a policy that records LoadLoRA calls.
type loadRecorder struct {
	policy.Policy
	loads [][2]string
}

func (l *loadRecorder) LoadLoRA(_ context.Context, name, path string) error {
	l.loads = append(l.loads, [2]string{name, path})
	return nil
}

// sync.kind tinker serves the sync.keep newest names; a pinned name (the
// initial weights an initial-policy teacher scores with, on a server
// whose sessions keep their own weights) stays served however many follow.
// Before the pin, the initial name fell out after keep steps and the
// teacher's requests went to the base model (source audit B2).
func TestTinkerSyncPin(t *testing.T) {
	tr, err := trainer.New(transport.Options{BaseURL: "http://127.0.0.1:1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	p, err := tinker.New(tr, tinker.Options{BaseModel: "base"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := &tinkerSync{ps: []*tinker.Client{p}, keep: 2}
	s.Serve("initial", trainer.SamplerSession{SessionID: "s0"})
	s.Pin("initial")
	for i := 1; i <= 5; i++ {
		s.Serve(fmt.Sprintf("step%d", i), trainer.SamplerSession{SessionID: fmt.Sprintf("s%d", i)})
	}
	for name, want := range map[string]bool{"initial": true, "step3": false, "step4": true, "step5": true} {
		if got := p.Serves(name); got != want {
			t.Errorf("serves %s: %v, want %v", name, got, want)
		}
	}
}
