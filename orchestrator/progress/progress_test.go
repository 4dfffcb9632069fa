package progress

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the ticker goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestParseMode(t *testing.T) {
	for _, c := range []struct {
		in   string
		tty  bool
		want Mode
	}{{"auto", true, Bars}, {"auto", false, Lines}, {"", false, Lines}, {"bars", false, Bars}, {"lines", true, Lines}, {"off", true, Off}} {
		got, err := ParseMode(c.in, c.tty)
		if err != nil || got != c.want {
			t.Errorf("ParseMode(%q, %v) = %q, %v; want %q", c.in, c.tty, got, err, c.want)
		}
	}
	if _, err := ParseMode("fancy", true); err == nil || !strings.Contains(err.Error(), "--progress") {
		t.Errorf("ParseMode(fancy) error = %v, want one naming --progress", err)
	}
}

func TestLineRateAndETA(t *testing.T) {
	now := time.Unix(1000, 0)
	r := New(&syncBuffer{}, Off, 0)
	r.now = func() time.Time { return now }
	tk := &Task{r: r, name: "rollout step 3", unit: "trajectories", total: 200, start: now}
	tk.done.Store(50)
	now = now.Add(10 * time.Second)
	want := "rollout step 3: 50/200 trajectories (25%), 5.0/s, 10s elapsed, about 30s left"
	if got := tk.Line(); got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	tk.total = 0
	if got := tk.Line(); got != "rollout step 3: 50 trajectories, 5.0/s, 10s elapsed" {
		t.Errorf("Line() without total = %q", got)
	}
}

func TestLinesModePrintsPeriodicallyAndFinalLine(t *testing.T) {
	var out syncBuffer
	r := New(&out, Lines, 5*time.Millisecond)
	tk := r.Start("eval step 8", 10, "questions")
	tk.Add(4)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "eval step 8: 4/10 questions (40%)") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line after 10s; output %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	tk.Add(6)
	tk.Done()
	tk.Done() // idempotent
	if !strings.Contains(out.String(), "eval step 8: 10 questions in ") {
		t.Errorf("no final line: %q", out.String())
	}
	if strings.Contains(out.String(), "\r") {
		t.Errorf("log output has carriage returns: %q", out.String())
	}
}

func TestLinesModeShortTaskIsSilent(t *testing.T) {
	var out syncBuffer
	r := New(&out, Lines, time.Hour)
	tk := r.Start("index", 3, "passages")
	tk.Add(3)
	tk.Done()
	if out.String() != "" {
		t.Errorf("short task printed %q", out.String())
	}
}

func TestBarsModeRedrawsBelowOutput(t *testing.T) {
	var out syncBuffer
	r := New(&out, Bars, 0)
	now := time.Unix(0, 0)
	r.now = func() time.Time { return now }
	tk := r.Start("rollout step 1", 4, "trajectories")
	tk.Add(2)
	if _, err := r.Writer().Write([]byte("step 1 line\n")); err != nil {
		t.Fatal(err)
	}
	ev := r.Start("eval", 0, "questions")
	tk.Add(2)
	tk.Done()
	ev.Done()
	if _, err := r.Writer().Write([]byte("final table\n")); err != nil {
		t.Fatal(err)
	}
	r.Close()
	// Replay the output on a tiny screen model: the cursor-up-and-clear
	// sequence erases the bar lines drawn before it.
	var screen []string
	for _, chunk := range strings.SplitAfter(out.String(), "\n") {
		for strings.HasPrefix(chunk, "\x1b[") {
			var n int
			if _, err := fmt.Sscanf(chunk, "\x1b[%dA\r\x1b[J", &n); err != nil {
				t.Fatalf("unexpected control sequence in %q", chunk)
			}
			screen = screen[:len(screen)-n]
			chunk = chunk[strings.Index(chunk, "\x1b[J")+3:]
		}
		if chunk != "" {
			screen = append(screen, strings.TrimSuffix(chunk, "\n"))
		}
	}
	want := []string{"step 1 line", "final table"}
	if strings.Join(screen, "|") != strings.Join(want, "|") {
		t.Errorf("screen after the run = %q, want %q (raw %q)", screen, want, out.String())
	}
	if !strings.Contains(out.String(), "rollout step 1           [===============               ] 2/4 trajectories  50%  0s") {
		t.Errorf("no half-full bar drawn: %q", out.String())
	}
}

func TestNilIsSilent(t *testing.T) {
	var r *Reporter
	tk := r.Start("x", 1, "u")
	tk.Add(1)
	tk.Done()
	r.Close()
	if _, err := r.Writer().Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := New(&syncBuffer{}, Off, 0).Start("x", 1, "u"); got != nil {
		t.Errorf("Off mode returned a task")
	}
}
