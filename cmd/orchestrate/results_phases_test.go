package main

import "testing"

// TestResultsPhasesGolden prints the per-step phase timings of the fixture
// run testdata/phasesrun (three steps; the last, without hindsight, records
// only rollout and train) against testdata/results_phases.golden.
func TestResultsPhasesGolden(t *testing.T) {
	out, stderr, err := runCLI(t, nil, "results", "testdata/phasesrun", "--phases")
	if err != nil {
		t.Fatalf("results --phases: %v (stderr %q)", err, stderr)
	}
	golden(t, "results_phases.golden", out)

	// Two runs: one block each, separated by a blank line.
	out, _, err = runCLI(t, nil, "results", "testdata/phasesrun", "testdata/phasesrun", "--phases")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "results_phases_two.golden", out)
}
