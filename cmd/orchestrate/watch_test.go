package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestWatchFlagErrors(t *testing.T) {
	_, _, err := runCLI(t, nil, "run", simRecipe, "--progress", "fancy")
	if err == nil || !strings.Contains(err.Error(), `--progress "fancy"`) {
		t.Errorf("bad --progress: error %v", err)
	}
	_, _, err = runCLI(t, nil, "eval", simRecipe, "--metrics-addr", "127.0.0.1:notaport")
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr 127.0.0.1:notaport") {
		t.Errorf("bad --metrics-addr: error %v", err)
	}
}

func TestRunWithMetricsAddrAndLogLines(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a training step")
	}
	dir := t.TempDir()
	stdout, stderr, err := runCLI(t, nil, "run", simRecipe, "--metrics-addr", "127.0.0.1:0", "--progress", "lines",
		"--set", "train.steps=1", "--set", "train.batch_size=4", "--set", "eval.per_dataset=2",
		"--set", "output.dir="+filepath.Join(dir, "run"), "--set", "retriever.index_dir="+filepath.Join(dir, "index"))
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if !regexp.MustCompile(`metrics on http://127\.0\.0\.1:\d+/metrics`).MatchString(stderr) {
		t.Errorf("stderr does not give the metrics address:\n%s", stderr)
	}
	// Off a terminal: plain lines, never a bar's redraw frames.
	if strings.Contains(stdout, "\r") || strings.Contains(stdout, "\x1b[") {
		t.Errorf("terminal control sequences in non-terminal output:\n%q", stdout)
	}
	if !regexp.MustCompile(`(?m)^step   1/1  reward\(EM\) \d\.\d{3}  F1 \d\.\d{3}  failed \d+/20  critiques \d+  opd_tokens \d+ \(mean -?\d\.\d{3}\)  rollout \d+\.\ds judge \d+\.\ds teacher \d+\.\ds train \d+\.\ds sync \d+\.\ds eval \d+\.\ds$`).MatchString(stdout) {
		t.Errorf("no step summary line:\n%s", stdout)
	}
}
