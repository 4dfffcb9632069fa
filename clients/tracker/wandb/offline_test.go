package wandb

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The framing of one record matches the wandb client's datastore byte for
// byte: the file header, then a FULL chunk of Record{num: 1, header: {}}
// (the example worked from wandb's datastore.py, docs/research).
func TestHeaderRecordBytes(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "x.wandb"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &Writer{f: f}
	if _, err := f.Write(fileHeader); err != nil {
		t.Fatal(err)
	}
	w.off = int64(len(fileHeader))
	if err := w.write(21, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(f.Name())
	if want := "3a572642e1be00" + "55b7a63f050001" + "0801aa0100"; hex.EncodeToString(got) != want {
		t.Errorf("bytes %x, want %s", got, want)
	}
}

// Records longer than a block are split into FIRST, MIDDLE and LAST
// chunks that never cross a block boundary, and Scan reads them back;
// a resume cuts the log after its step and goes on from there.
func TestLogAcrossBlocksAndResume(t *testing.T) {
	root := t.TempDir()
	start := time.Unix(1_800_000_000, 0)
	big := map[string]any{"notes": strings.Repeat("x", 70000)}
	run := Run{ID: "abc12345", Project: "p", Config: big, Start: start}
	w, err := Open(root, run, -1)
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s <= 5; s++ {
		if err := w.Log(s, start.Add(time.Duration(s)*time.Second), map[string]float64{"loss": float64(s)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	steps := func() []int {
		fh, err := os.Open(filepath.Join(w.Dir(), "run-abc12345.wandb"))
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		recs, err := Scan(fh)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, r := range recs {
			if r.Step != nil {
				out = append(out, *r.Step)
			}
			if r.Exit {
				out = append(out, -1)
			}
		}
		return out
	}
	if got := steps(); len(got) != 6 || got[5] != 5 {
		t.Fatalf("steps %v", got)
	}
	// The run record spans blocks: a FIRST, a MIDDLE and a LAST chunk,
	// each starting a block after the first.
	data, _ := os.ReadFile(filepath.Join(w.Dir(), "run-abc12345.wandb"))
	if len(data) < 2*blockSize || data[blockSize+6] != chunkMiddle || data[2*blockSize+6] != chunkLast {
		t.Fatalf("log of %d bytes: the run record should span blocks", len(data))
	}
	w2, err := Open(root, run, 3)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Dir() != w.Dir() {
		t.Errorf("resumed into %s, want %s", w2.Dir(), w.Dir())
	}
	for s := 4; s <= 6; s++ {
		if err := w2.Log(s, start.Add(time.Duration(s)*time.Second), map[string]float64{"loss": float64(s)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w2.Exit(0, start.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	w2.Close()
	if got := steps(); !equal(got, []int{0, 1, 2, 3, 4, 5, 6, -1}) {
		t.Errorf("after the resume: steps %v, want 0..6 once and the exit", got)
	}
	if w2.start != start {
		t.Errorf("resumed runtime origin %v, want the run record's %v", w2.start, start)
	}
	if link, _ := os.Readlink(filepath.Join(root, "wandb", "latest-run")); link != filepath.Base(w.Dir()) {
		t.Errorf("latest-run -> %q", link)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
