package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// runDoctor runs orchestrate doctor on the sim recipe with sets, the BM25
// index in indexDir and the run directory in a temporary directory.
func runDoctor(t *testing.T, indexDir string, environ []string, sets ...string) (string, error) {
	t.Helper()
	args := []string{"doctor", simRecipe, "--set", "retriever.index_dir=" + indexDir, "--set", "output.dir=" + filepath.Join(t.TempDir(), "run")}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	// The first call builds the BM25 index of the shipped corpus (runCLI's
	// guard allows for it).
	stdout, _, err := runCLI(t, environ, args...)
	return stdout, err
}

// statusOf returns the status column of the table row whose role and check
// columns are given ("" when there is none).
func statusOf(out, role, check string) string {
	for _, line := range strings.Split(out, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 {
			continue
		}
		if strings.TrimSpace(cells[1]) == role && strings.TrimSpace(cells[3]) == check {
			return strings.TrimSpace(cells[4])
		}
	}
	return ""
}

func TestDoctor(t *testing.T) {
	index := t.TempDir()

	t.Run("embedded default is green", func(t *testing.T) {
		out, err := runDoctor(t, index, nil)
		if err != nil {
			t.Fatalf("doctor: %v\n%s", err, out)
		}
		for _, rc := range [][2]string{
			{"policy", "health"}, {"policy", "models"}, {"policy", "lora routes"}, {"policy", "chat template"}, {"policy", "logprobs"}, {"policy", "sampled vs prefill"}, {"policy", "tokenizer"}, {"policy", "local tokenizer"},
			{"judge", "chat"}, {"retriever", "retrieve"}, {"trainer", "healthz"}, {"trainer", "base model"}, {"trainer", "delete route"},
			{"trainer", "weights"}, {"trainer", "optimizer"}, {"trainer", "checkpoints dir"}, {"teacher", "hinted contexts"},
			{"sync", "sync dir"}, {"sync", "policy access"},
		} {
			if st := statusOf(out, rc[0], rc[1]); st != "ok" {
				t.Errorf("%s %s: status %q, want ok\n%s", rc[0], rc[1], st, out)
			}
		}
		if !strings.Contains(out, "all 21 checks passed") || strings.Contains(out, "FAIL") {
			t.Errorf("verdict:\n%s", out)
		}
	})

	t.Run("failures are named with their fix and fail the command", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + l.Addr().String()
		l.Close()
		out, err := runDoctor(t, index, []string{"OTHER=1"},
			"judge.url="+dead, "judge.api_key_env=DOCTOR_TEST_JUDGE_KEY", "http.retries=0")
		if err == nil || !strings.Contains(err.Error(), "1 of 22 checks failed") {
			t.Fatalf("doctor with a dead judge: %v\n%s", err, out)
		}
		if st := statusOf(out, "judge", "api key"); st != "warn" {
			t.Errorf("judge api key: %q", st)
		}
		if st := statusOf(out, "judge", "chat"); st != "FAIL" {
			t.Errorf("judge chat: %q", st)
		}
		// Every other check still ran.
		for _, rc := range [][2]string{{"policy", "tokenizer"}, {"policy", "local tokenizer"}, {"retriever", "retrieve"}, {"trainer", "base model"}, {"sync", "sync dir"}} {
			if st := statusOf(out, rc[0], rc[1]); st != "ok" {
				t.Errorf("%s %s: status %q after the judge failed", rc[0], rc[1], st)
			}
		}
		for _, w := range []string{"FAIL judge " + dead + " chat", "fix: start the judge server", "fix judge.url",
			"warn judge " + dead + " api key: DOCTOR_TEST_JUDGE_KEY (named by judge.api_key_env) is not set", "fix: export DOCTOR_TEST_JUDGE_KEY=<the key> if the server needs one"} {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	})
}
