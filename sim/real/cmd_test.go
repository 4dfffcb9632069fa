package real_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the repository root (this package is sim/real).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// orchestrate is the orchestrate binary, built once per test binary into
// a directory removed by TestMain.
func orchestrate(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "hindsearch-real-bin")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "orchestrate")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/orchestrate")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = &buildError{err, string(out)}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "go build ./cmd/orchestrate: " + e.err.Error() + "\n" + e.out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// simAddrs is the line `orchestrate serve sim` prints.
type simAddrs struct {
	Policy         []string `json:"policy"`
	Judge          string   `json:"judge"`
	Trainer        string   `json:"trainer"`
	Retriever      string   `json:"retriever"`
	CheckpointsDir string   `json:"checkpoints_dir"`
}

// serveSim starts `orchestrate serve sim RECIPE --set ...` until the test
// ends (its stdin pipe closed) and returns the addresses it printed; an
// entry of sets starting with "--" is passed as a flag of serve sim.
func serveSim(t *testing.T, recipe string, sets ...string) simAddrs {
	t.Helper()
	args := []string{"serve", "sim", recipe}
	for _, s := range sets {
		if strings.HasPrefix(s, "--") { // a flag of serve sim's own
			args = append(args, s)
			continue
		}
		args = append(args, "--set", s)
	}
	cmd := exec.Command(orchestrate(t), args...)
	cmd.Dir = repoRoot(t)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve sim: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		t.Fatalf("serve sim printed no addresses: %v", err)
	}
	go io.Copy(io.Discard, stdout)
	var a simAddrs
	if err := json.Unmarshal(line, &a); err != nil {
		t.Fatalf("serve sim: %q: %v", line, err)
	}
	return a
}
