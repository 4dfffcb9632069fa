package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResultsHealthGolden tables the health of the fixture run
// testdata/healthrun (five steps of the simulator with the abnormal agent,
// the filter, the turn penalty and a collapse alarm from step 3; step 1's
// record is from before the health object and is left out, steps 2 and 3
// from before gold_retrieved_rate, "-" in its column) against
// testdata/results_health.golden, and draws its curves where --plot says.
func TestResultsHealthGolden(t *testing.T) {
	png1 := filepath.Join(t.TempDir(), "health.png")
	out, stderr, err := runCLI(t, nil, "results", "testdata/healthrun", "--health", "--plot", png1)
	if err != nil {
		t.Fatalf("results --health: %v (stderr %q)", err, stderr)
	}
	golden(t, "results_health.golden", out)
	f, err := os.Open(png1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1440 || b.Dy() != 816 {
		t.Errorf("health curves %dx%d, want 1440x816", b.Dx(), b.Dy())
	}
	// Two runs and one --plot file is refused; a run without health says so.
	if _, _, err := runCLI(t, nil, "results", "testdata/healthrun", "testdata/healthrun", "--health", "--plot", png1); err == nil ||
		!strings.Contains(err.Error(), "--plot names one file") {
		t.Errorf("two runs, one --plot: %v", err)
	}
	if _, _, err := runCLI(t, nil, "results", "testdata/phasesrun", "--health"); err == nil ||
		!strings.Contains(err.Error(), "no step records with health") {
		t.Errorf("a run without health: %v", err)
	}
}
