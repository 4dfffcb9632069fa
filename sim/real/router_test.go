package real_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// routerBin is vllm-router's executable in the environment `make
// router-check` installed (HINDSEARCH_ROUTER_BIN); the test skips without
// it.
func routerBin(t *testing.T) string {
	t.Helper()
	return installed(t, "HINDSEARCH_ROUTER_BIN", "vllm-router is not installed: make router-check (sim/real/README.md) sets HINDSEARCH_ROUTER_BIN")
}

// freePort is a loopback port free when asked.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRouter starts vllm-router on loopback with no worker (the program
// adds its replicas) and the consistent_hash policy, stopped (its
// process group) when the test ends. Its metrics port is a free port of
// its own: two routers on the default one (29000) cannot both start.
func startRouter(t *testing.T, bin string) string {
	t.Helper()
	port := freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	startServer(t, "vllm-router", url+"/list_workers", time.Minute, 10*time.Second, bin, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"--prometheus-port", fmt.Sprint(freePort(t)), "--policy", "consistent_hash", "--log-level", "warning")
	return url
}

// digests are a run directory's batch digests, in step order.
func digests(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "steps.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`"batch_digest":"[0-9a-f]+"`).FindAllString(string(b), -1)
}

// sessionsByReplica reads serve sim's request logs: for each session
// (X-Session-ID), the replicas whose log has it.
func sessionsByReplica(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "policy-*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no request logs in %s (%v)", dir, err)
	}
	out := map[string][]string{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var l struct {
				Session string `json:"session"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if !slices.Contains(out[l.Session], filepath.Base(f)) {
				out[l.Session] = append(out[l.Session], filepath.Base(f))
			}
		}
		fh.Close()
	}
	return out
}

// The program behind the real vllm-router (0.1.17, pinned) in front of
// two simulated vLLMs: the same batches as the program calling them
// directly, and every trajectory's requests on one replica (the
// simulator's request logs, which record each request's X-Session-ID).
func TestRouterSim(t *testing.T) {
	bin := routerBin(t)
	sets := func(a simAddrs) []string {
		return []string{"policy.urls=" + strings.Join(a.Policy, ","), "policy.tokenizer=sim", "judge.url=" + a.Judge,
			"trainer.url=" + a.Trainer, "trainer.checkpoints_dir=" + a.CheckpointsDir, "retriever.url=" + a.Retriever,
			"train.steps=4"}
	}
	// Direct: its own simulated servers.
	direct := filepath.Join(t.TempDir(), "direct")
	orch(t, []string{"run", "recipes/sim.yaml"}, append(sets(serveSim(t, "recipes/sim.yaml", "policy.urls=embedded,embedded")), "output.dir="+direct))

	logs := t.TempDir()
	a := serveSim(t, "recipes/sim.yaml", "policy.urls=embedded,embedded", "--request-log="+logs)
	base := sets(a)
	router := startRouter(t, bin)
	routed := filepath.Join(t.TempDir(), "routed")
	out := orch(t, []string{"run", "recipes/sim.yaml"}, append(slices.Clone(base), "output.dir="+routed, "policy.router_url="+router))
	if !strings.Contains(out, "SIMULATED") {
		t.Errorf("the routed run's output does not say SIMULATED:\n%s", out)
	}
	dd, rd := digests(t, direct), digests(t, routed)
	if len(dd) != 4 || !slices.Equal(dd, rd) {
		t.Errorf("batch digests differ through the router:\ndirect %v\nrouted %v", dd, rd)
	}
	// The router's worker list is the two replicas.
	resp, err := http.Get(router + "/list_workers")
	if err != nil {
		t.Fatal(err)
	}
	var lw struct {
		URLs []string `json:"urls"`
	}
	json.NewDecoder(resp.Body).Decode(&lw)
	resp.Body.Close()
	slices.Sort(lw.URLs)
	want := slices.Sorted(slices.Values(a.Policy))
	if !slices.Equal(lw.URLs, want) {
		t.Errorf("router workers %v, want %v", lw.URLs, want)
	}
	// Every session on one replica; both replicas used.
	byReplica := map[string]int{}
	sessions := 0
	for s, rs := range sessionsByReplica(t, logs) {
		if s == "" {
			continue // the teacher's and the reference's scoring: by load
		}
		sessions++
		if len(rs) != 1 {
			t.Errorf("session %s went to %v", s, rs)
		}
		byReplica[rs[0]]++
	}
	t.Logf("%d sessions through the router: %v", sessions, byReplica)
	if sessions < 100 || len(byReplica) != 2 {
		t.Errorf("%d sessions over %v: want every trajectory's requests, over both replicas", sessions, byReplica)
	}
}
