package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

// showRun is the fixture run directory: step 1 holds one record without
// per-token pieces, step 2 three with pieces (a failed one with positive
// OPD terms on search tokens and a critique, a solved one without OPD, a
// failed one with negative terms, an invalid turn and a critique error).
const showRun = "testdata/showrun"

func TestShowGolden(t *testing.T) {
	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"show_default.golden", nil},
		{"show_failed.golden", []string{"--failed"}},
		{"show_id.golden", []string{"--id", "s0001-g000000-k0"}},
		{"show_step_id.golden", []string{"--step", "2", "--id", "s0002-g000001-k0", "--color", "never"}},
	} {
		out, stderr, err := runCLI(t, nil, append([]string{"show", showRun}, c.args...)...)
		if err != nil {
			t.Fatalf("%s: %v (stderr %q)", c.golden, err, stderr)
		}
		if strings.Contains(out, "\x1b[") {
			t.Errorf("%s: output to a buffer has ANSI codes", c.golden)
		}
		golden(t, c.golden, out)
	}
}

func TestShowContent(t *testing.T) {
	out, _, err := runCLI(t, nil, "show", showRun)
	if err != nil {
		t.Fatal(err)
	}
	// The latest step, every trajectory, each part of a trajectory.
	for _, want := range []string{
		"testdata/showrun step 2: 3 of 3 kept trajectories (steps with trajectories: 1, 2)",
		"question (hotpotqa 5a78bc6b): Woman's Era and Naj are what kind of magazines?",
		"gold: fortnightly women interest magazine | women's magazines",
		"turn 1 · search\n    <think> I need more information. </think>\n    <search> ⟦Woman's⟧⟨+0.50⟩ ⟦Era⟧⟨+0.25⟩ magazine </search>\n",
		"query: Woman's Era magazine", `retrieved: "Woman's Era"; "Naj"`, "answer: monthly",
		"failed · reward 0.00 · F1 0.00 · advantage -0.50 · finish answer",
		"critique: You found the right passage",
		"solved · reward 1.00 · F1 1.00 · advantage +0.50",
		"⟦<search> hallelujah song⟧⟨-0.30⟩ ⟦writer⟧⟨-0.12⟩ </search>",
		"turn 2 · invalid (neither search nor answer) · finish length",
		"critique error: judge critique: http://127.0.0.1:9/v1/chat/completions: 503 Service Unavailable",
		"opd: non-zero on 4 of 5 search tokens, sum -1.02, range -0.30 to -0.12",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("line of %d runes: %q", n, line)
		}
	}

	// --failed drops the solved trajectory.
	out, _, err = runCLI(t, nil, "show", showRun, "--failed")
	if err != nil || strings.Contains(out, "s0002-g000000-k1") || strings.Count(out, "=== ") != 2 {
		t.Errorf("--failed (%v):\n%s", err, out)
	}
	// A record without pieces falls back to the turn text and per-turn OPD.
	out, _, err = runCLI(t, nil, "show", showRun, "--id", "s0001-g000000-k0")
	for _, want := range []string{"step 1: 1 of 1", "    <search> hallelujah song writer </search>\n    opd: non-zero on 2 of 5 search tokens, each +0.80\n", "(no per-token text in this record"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("--id of an older step lacks %q (%v):\n%s", want, err, out)
		}
	}
}

func TestShowColor(t *testing.T) {
	out, _, err := runCLI(t, nil, "show", showRun, "--color", "always")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\x1b[48;5;34;38;5;15mWoman's\x1b[0m",                  // +0.50: third green
		"\x1b[48;5;28;38;5;15mEra\x1b[0m",                      // +0.25: second green
		"\x1b[48;5;88;38;5;15m<search> hallelujah song\x1b[0m", // -0.30: second red
		"\x1b[2m⟨+0.50⟩\x1b[0m",
		"OPD term: \x1b[48;5;196;38;5;16m -1.00 \x1b[0m",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("coloured output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "⟦") {
		t.Errorf("coloured output has plain marks:\n%s", out)
	}
	// NO_COLOR keeps auto plain (and a buffer is no terminal anyway).
	out, _, err = runCLI(t, []string{"NO_COLOR=1"}, "show", showRun, "--color", "auto")
	if err != nil || strings.Contains(out, "\x1b[") {
		t.Errorf("--color auto: %v, ANSI codes: %v", err, strings.Contains(out, "\x1b["))
	}
}

func TestUseColor(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		mode    string
		w       io.Writer
		environ []string
		want    bool
	}{
		{"always", &bytes.Buffer{}, nil, true},
		{"never", f, nil, false},
		{"auto", &bytes.Buffer{}, nil, false},
		{"auto", f, nil, false}, // a regular file is no terminal
	} {
		got, err := useColor(c.mode, c.w, c.environ)
		if err != nil || got != c.want {
			t.Errorf("useColor(%s, %T) = %v, %v; want %v", c.mode, c.w, got, err, c.want)
		}
	}
	// A terminal, where the machine has one to open.
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if got, _ := useColor("auto", tty, nil); !got {
			t.Error("auto on /dev/tty: no colour")
		}
		if got, _ := useColor("auto", tty, []string{"TERM=dumb"}); got {
			t.Error("auto with TERM=dumb: colour")
		}
	}
}

func TestShowErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.MkdirAll(filepath.Join(bad, "trajectories"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "trajectories", "step-0003.jsonl"),
		[]byte(`{"id":"a","tokens":[1],"policy":[true],"search":[false]}`+"\n"+`{"id":"b","tokens":[1,2],"policy":[true],"search":[false,false]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{showRun, "--step", "7"}, "testdata/showrun: no trajectories for step 7 (steps with trajectories: 1, 2)"},
		{[]string{showRun, "--id", "nope"}, "testdata/showrun: no trajectory with id nope in steps 1, 2"},
		{[]string{showRun, "--step", "2", "--id", "s0001-g000000-k0"}, "no trajectory with id s0001-g000000-k0 in step 2"},
		{[]string{showRun, "--step", "2", "--id", "s0002-g000000-k1", "--failed"}, "no trajectory with id s0002-g000000-k1 and failed in step 2"},
		{[]string{showRun, "--color", "sometimes"}, `--color "sometimes": want auto, always or never`},
		{[]string{filepath.Join(dir, "missing")}, "missing: no such run directory"},
		{[]string{empty}, "empty has no trajectories/ files"},
		{[]string{bad}, "step-0003.jsonl:2: trajectory \"b\": 1 policy values for 2 tokens"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"show"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("show %q: error %v, want %q", c.args, err, c.want)
		}
	}
}

// An evaluation keeps output.trajectories of its trajectories, those the
// health counts against first, and show --eval prints them with the
// evaluation's health per dataset; a strategy without kept trajectories,
// or an unknown one, is a clear error.
func TestShowEval(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	_, stderr, err := runCLI(t, nil, "eval", "../../recipes/sim.yaml", "--progress", "off",
		"--set", "output.dir="+dir, "--set", "output.trajectories=3", "--set", "eval.per_dataset=2",
		"--set", "rollout.max_obs_tokens=24")
	if err != nil {
		t.Fatalf("eval: %v (stderr %q)", err, stderr)
	}
	out, stderr, err := runCLI(t, nil, "show", dir, "--eval", "search", "--color", "never")
	if err != nil {
		t.Fatalf("show --eval: %v (stderr %q)", err, stderr)
	}
	for _, want := range []string{
		"step 0: 3 of 3 kept search evaluation trajectories",
		"\nhotpotqa health: searches ", "\nnq health: searches ", "after a cut (",
		"observation cut at rollout.max_obs_tokens",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show --eval lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n=== eval-"); n != 3 {
		t.Errorf("show --eval printed %d trajectories, want 3", n)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{dir, "--eval", "rag"}, "has no rag evaluation trajectories (output.trajectories 0, or no rag evaluation has run)"},
		{[]string{dir, "--eval", "oracle"}, `--eval "oracle": want one of direct, rag, search`},
		{[]string{dir, "--eval", "search", "--step", "3"}, "no trajectories of a search evaluation at step 3 (steps with them: 0)"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"show"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("show %q: error %v, want %q", c.args, err, c.want)
		}
	}
}
