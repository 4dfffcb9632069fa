package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// smallCorpus writes the first n passages of the shipped corpus to dir (a
// small index builds in a moment).
func smallCorpus(t *testing.T, dir string, n int) string {
	t.Helper()
	data, err := os.ReadFile("../../recipes/data/corpus/passages.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfterN(data, []byte("\n"), n+1)
	path := filepath.Join(dir, "passages.jsonl")
	if err := os.WriteFile(path, bytes.Join(lines[:n], nil), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveSimRun is serve sim running in process.
type serveSimRun struct {
	stdout *bufio.Reader
	stdin  *io.PipeWriter
	stderr *bytes.Buffer // read only after done
	done   chan error
	cancel context.CancelFunc
}

// startServeSim runs "serve sim" with args on a fresh command tree, with
// stdin and stdout pipes. Cleanup cancels it and waits for it.
func startServeSim(t *testing.T, args ...string) *serveSimRun {
	t.Helper()
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	run := &serveSimRun{stdout: bufio.NewReader(outR), stdin: inW, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	root := newRootCmd(outW, run.stderr, nil)
	root.SetIn(inR)
	root.SetArgs(append([]string{"serve", "sim"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	run.cancel = cancel
	go func() {
		err := root.ExecuteContext(ctx)
		outW.Close()
		inR.Close() // ends the stdin reader goroutine
		run.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		go io.Copy(io.Discard, outR) // nothing should come, but never block the command
		select {
		case <-run.done:
		case <-time.After(30 * time.Second):
			t.Error("serve sim did not stop")
		}
	})
	return run
}

// wait returns the command's error once it has stopped.
func (r *serveSimRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("serve sim did not stop")
		return nil
	}
}

func simArgs(t *testing.T, dir string, more ...string) []string {
	return append([]string{simRecipe,
		"--set", "retriever.corpus=" + smallCorpus(t, dir, 300),
		"--set", "retriever.index_dir=" + filepath.Join(dir, "index"),
		"--set", "output.dir=" + filepath.Join(dir, "out"),
	}, more...)
}

// TestServeSim starts every embedded role of the sim recipe (two policy
// replicas, with latency), reads the JSON line, checks each server answers,
// then cancels the command and checks they are gone.
func TestServeSim(t *testing.T) {
	dir := t.TempDir()
	run := startServeSim(t, simArgs(t, dir, "--set", "policy.urls=embedded,embedded", "--set", "sim.decode_ms=0.5",
		"--set", "sim.capacity=4", "--set", "sim.retriever_batch_ms=1", "--set", "sim.retriever_style=bm25", "--json")...)
	line, err := run.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("no address line (%v); command: %v", err, run.wait(t))
	}
	var addrs struct {
		Policy         []string `json:"policy"`
		Judge          string   `json:"judge"`
		Trainer        string   `json:"trainer"`
		Retriever      string   `json:"retriever"`
		CheckpointsDir string   `json:"checkpoints_dir"`
		Simulated      bool     `json:"simulated"`
	}
	if err := json.Unmarshal([]byte(line), &addrs); err != nil {
		t.Fatalf("address line %q: %v", line, err)
	}
	if len(addrs.Policy) != 2 || addrs.Judge == "" || addrs.Trainer == "" || addrs.Retriever == "" || !addrs.Simulated ||
		addrs.CheckpointsDir != filepath.Join(dir, "out", "checkpoints") {
		t.Fatalf("addresses %+v", addrs)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	health := append([]string{}, addrs.Policy[0]+"/health", addrs.Policy[1]+"/health", addrs.Judge+"/health",
		addrs.Trainer+"/api/v1/healthz")
	for _, u := range append(health, addrs.Retriever+"/health") {
		if !strings.HasPrefix(u, "http://127.0.0.1:") {
			t.Errorf("%s is not on loopback", u)
		}
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// Search-R1's retrieval server has no health route.
		if want := map[bool]int{false: http.StatusOK, true: http.StatusNotFound}[u == addrs.Retriever+"/health"]; resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", u, resp.StatusCode, want)
		}
	}
	health = append(health, addrs.Retriever+"/health")
	// The policy runs through the engine (the recipe's latency).
	resp, err := client.Post(addrs.Policy[1]+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"sim/Qwen2.5-3B-Instruct","prompt":"Question: who wrote it?","max_tokens":8,"seed":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Sim-Decode-Steps") == "" || resp.Header.Get("X-Hindsearch-Simulator") != "true" {
		t.Errorf("completion: %d %s, headers %v", resp.StatusCode, b, resp.Header)
	}
	// The retriever is the real index, behind the delay, in the BM25
	// server's shape (sim.retriever_style).
	resp, err = client.Post(addrs.Retriever+"/retrieve", "application/json", strings.NewReader(`{"queries":["film"],"topk":2,"return_scores":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var ret struct {
		Result [][]struct {
			Document map[string]any `json:"document"`
		} `json:"result"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ret)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(ret.Result) != 1 || len(ret.Result[0]) == 0 {
		t.Fatalf("retrieve: %d %v %v", resp.StatusCode, err, ret)
	}
	if d := ret.Result[0][0].Document; d["id"] != nil || d["title"] == nil || d["text"] == nil || d["contents"] == nil {
		t.Errorf("bm25 style document %v", d)
	}

	run.cancel()
	if err := run.wait(t); err != nil {
		t.Fatalf("serve sim: %v", err)
	}
	stderr := run.stderr.String()
	for _, want := range []string{"SIMULATED", "2 policy replica(s)", "simulated policy 1: 1 requests", "retriever: 1 calls, 1 queries"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	for _, u := range health {
		if resp, err := client.Get(u); err == nil {
			resp.Body.Close()
			t.Errorf("%s still answers after the command ended", u)
		}
	}
}

// TestServeSimStdinClose serves the policy alone, prints plain lines, and
// stops when stdin closes.
func TestServeSimStdinClose(t *testing.T) {
	dir := t.TempDir()
	run := startServeSim(t, simArgs(t, dir, "--set", "judge.url=http://127.0.0.1:9", "--set", "trainer.url=http://127.0.0.1:9",
		"--set", "retriever.url=http://127.0.0.1:9", "--set", "reference.urls=", "--json=false")...)
	line, err := run.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("no address line (%v); command: %v", err, run.wait(t))
	}
	u, ok := strings.CutPrefix(strings.TrimSpace(line), "policy ")
	if !ok || !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("line %q", line)
	}
	run.stdin.Close()
	if err := run.wait(t); err != nil {
		t.Fatalf("serve sim: %v", err)
	}
	if rest, _ := io.ReadAll(run.stdout); len(rest) != 0 {
		t.Errorf("more output: %q", rest)
	}
	if resp, err := http.Get(u + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("%s still answers", u)
	}
}

// TestServeSimNothingEmbedded refuses a recipe with no embedded role.
func TestServeSimNothingEmbedded(t *testing.T) {
	_, _, err := runCLI(t, nil, "serve", "sim", simRecipe, "--set", "policy.urls=http://127.0.0.1:9",
		"--set", "judge.url=http://127.0.0.1:9", "--set", "trainer.url=http://127.0.0.1:9", "--set", "retriever.url=http://127.0.0.1:9",
		"--set", "reference.urls=")
	if err == nil || !strings.Contains(err.Error(), "embedded") {
		t.Errorf("serve sim with nothing embedded: %v", err)
	}
}
