package orchestrator

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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
	"github.com/hindsearch/hindsearch/clients/transport"
	"github.com/hindsearch/hindsearch/sim"
)

func TestArchivePath(t *testing.T) {
	got, err := ArchivePath("/ck", "tinker://model-1/sampler_weights/run-step0001")
	if err != nil || got != filepath.FromSlash("/ck/model-1/sampler_weights/run-step0001.tar.gz") {
		t.Errorf("ArchivePath = %q, %v", got, err)
	}
	got, err = ArchivePath("rel/ck", "tinker://m/./sampler_weights//x")
	if err != nil || got != filepath.FromSlash("rel/ck/m/sampler_weights/x.tar.gz") {
		t.Errorf("ArchivePath, uncleaned = %q, %v", got, err)
	}
	got, err = ArchivePath("/ck", "tinker://m/a/../sampler_weights/x")
	if err != nil || got != filepath.FromSlash("/ck/m/sampler_weights/x.tar.gz") {
		t.Errorf("ArchivePath, inner .. = %q, %v", got, err)
	}
	for _, bad := range []string{
		"", "tinker://", "s3://m/sampler_weights/x", "m/sampler_weights/x", "TINKER://m/x",
		"tinker://..", "tinker://../x", "tinker://m/../../x", "tinker:///etc/passwd", "tinker://m/../..",
	} {
		got, err := ArchivePath("/ck", bad)
		if err == nil {
			t.Errorf("ArchivePath(%q) = %q, want an error", bad, got)
			continue
		}
		if !strings.Contains(err.Error(), bad) && bad != "" {
			t.Errorf("ArchivePath(%q): error %q does not name the path", bad, err)
		}
	}
}

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
func simParams() sim.Params {
	p := make(sim.Params, sim.NumParams)
	for i := range p {
		p[i] = float64(i) / 4
	}
	return p
}

// writeSimArchive writes a real simulator adapter archive to path.
func writeSimArchive(t *testing.T, path string) {
	t.Helper()
	b, err := sim.AdapterArchive(simParams(), "sim/base", 8)
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
	p, err := sim.ReadAdapter(got)
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
	if _, err := sim.ReadAdapter(dir); err != nil {
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

// loraServer is a fake vLLM policy server for adapter hot-loading: it
// records the bodies of load and unload requests and lists the base model
// and the loaded adapters at /v1/models.
type loraServer struct {
	*httptest.Server
	mu       sync.Mutex
	loads    []map[string]any
	unloads  []map[string]any
	adapters []string
	// hide, when set, keeps adapters out of /v1/models.
	hide bool
	// failLoad makes load requests answer 500.
	failLoad bool
}

func newLoRAServer(t *testing.T) *loraServer {
	s := &loraServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		var body map[string]any
		if r.Method == http.MethodPost {
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, "bad json", http.StatusBadRequest)
				return
			}
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/load_lora_adapter":
			s.loads = append(s.loads, body)
			if s.failLoad {
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
		case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
			data := []map[string]any{{"id": "base", "object": "model"}}
			if !s.hide {
				for _, a := range s.adapters {
					data = append(data, map[string]any{"id": a, "object": "model", "parent": "base"})
				}
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *loraServer) client(t *testing.T) policy.Policy {
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

func TestLoRASyncApply(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(root, "checkpoints")
	servers := []*loraServer{newLoRAServer(t), newLoRAServer(t)}
	ps := []policy.Policy{servers[0].client(t), servers[1].client(t)}
	s := &loraSync{checkpointsDir: ck, dir: "adapters", keep: 2} // relative: lora_path must be absolute
	ctx := context.Background()

	names := []string{"run-step0001", "run-step0002", "run-step0003"}
	for i, name := range names {
		writeSimArchive(t, filepath.Join(ck, "model-7", "sampler_weights", name+".tar.gz"))
		served, err := s.apply(ctx, ps, "tinker://model-7/sampler_weights/"+name, name)
		if err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
		if want := []string{ps[0].URL(), ps[1].URL()}; !slices.Equal(served, want) {
			t.Errorf("apply %s served %v, want %v", name, served, want)
		}
		abs := filepath.Join(wd, "adapters", name)
		for k, srv := range servers {
			srv.mu.Lock()
			got := srv.loads[i]
			srv.mu.Unlock()
			if want := map[string]any{"lora_name": name, "lora_path": abs}; !reflect.DeepEqual(got, want) {
				t.Errorf("server %d load body %v, want exactly %v", k, got, want)
			}
		}
		if _, err := sim.ReadAdapter(abs); err != nil {
			t.Errorf("adapter %s not unpacked at %s: %v", name, abs, err)
		}
		noPartial(t, abs)
	}
	for k, srv := range servers {
		srv.mu.Lock()
		unloads, adapters, nLoads := srv.unloads, srv.adapters, len(srv.loads)
		srv.mu.Unlock()
		if nLoads != 3 {
			t.Errorf("server %d: %d loads, want 3", k, nLoads)
		}
		if want := []map[string]any{{"lora_name": "run-step0001"}}; !reflect.DeepEqual(unloads, want) {
			t.Errorf("server %d unload bodies %v, want exactly %v", k, unloads, want)
		}
		if want := []string{"run-step0002", "run-step0003"}; !slices.Equal(adapters, want) {
			t.Errorf("server %d serves %v, want %v", k, adapters, want)
		}
	}
	if _, err := os.Stat(filepath.Join(wd, "adapters", "run-step0001")); !os.IsNotExist(err) {
		t.Error("the unloaded adapter's directory is still there")
	}
	if !slices.Equal(s.loaded, []string{"run-step0002", "run-step0003"}) {
		t.Errorf("loaded = %v", s.loaded)
	}
}

func TestLoRASyncApplyNestedAndErrors(t *testing.T) {
	root := t.TempDir()
	ck := filepath.Join(root, "ck")
	srv := newLoRAServer(t)
	ps := []policy.Policy{srv.client(t)}
	s := &loraSync{checkpointsDir: ck, dir: filepath.Join(root, "adapters"), keep: 1}
	ctx := context.Background()

	writeTarGz(t, filepath.Join(ck, "m", "sampler_weights", "n1.tar.gz"), []tarEntry{
		{name: "n1/adapter_config.json", body: "{}"}, {name: "n1/adapter_model.safetensors", body: "w"},
	})
	if _, err := s.apply(ctx, ps, "tinker://m/sampler_weights/n1", "n1"); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	got := srv.loads[0]["lora_path"]
	srv.mu.Unlock()
	if want := filepath.Join(root, "adapters", "n1", "n1"); got != want {
		t.Errorf("lora_path %v, want the nested adapter dir %s", got, want)
	}

	// A bad tinker path, a missing archive: errors, nothing sent.
	if _, err := s.apply(ctx, ps, "tinker://../x", "n2"); err == nil || !strings.HasPrefix(err.Error(), "sync: ") {
		t.Errorf("bad path: %v", err)
	}
	if _, err := s.apply(ctx, ps, "tinker://m/sampler_weights/none", "n2"); err == nil || !strings.Contains(err.Error(), "none.tar.gz") {
		t.Errorf("missing archive: %v", err)
	}
	srv.mu.Lock()
	if len(srv.loads) != 1 {
		t.Errorf("%d loads after failed syncs, want 1", len(srv.loads))
	}
	srv.mu.Unlock()

	// The server accepts the load but does not list the adapter.
	writeSimArchive(t, filepath.Join(ck, "m", "sampler_weights", "n3.tar.gz"))
	srv.mu.Lock()
	srv.hide = true
	srv.mu.Unlock()
	if _, err := s.apply(ctx, ps, "tinker://m/sampler_weights/n3", "n3"); err == nil || !strings.Contains(err.Error(), "does not list adapter n3") {
		t.Errorf("unlisted adapter: %v", err)
	}
	// The server refuses the load.
	srv.mu.Lock()
	srv.hide, srv.failLoad = false, true
	srv.mu.Unlock()
	if _, err := s.apply(ctx, ps, "tinker://m/sampler_weights/n3", "n3"); err == nil ||
		!strings.Contains(err.Error(), "load adapter n3 on "+srv.URL) {
		t.Errorf("refused load: %v", err)
	}
	if !slices.Equal(s.loaded, []string{"n1"}) {
		t.Errorf("loaded = %v after failed syncs, want [n1]", s.loaded)
	}
	srv.mu.Lock()
	if len(srv.unloads) != 0 {
		t.Errorf("failed syncs unloaded %v", srv.unloads)
	}
	srv.mu.Unlock()
}
