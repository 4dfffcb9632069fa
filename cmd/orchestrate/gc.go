package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the garbage collector's GOGC for this binary when the
// environment sets none (the Go default is 100). The control plane keeps
// little live data (the trajectories of a step) and allocates steadily
// (each policy turn's HTTP request and answer), so at GOGC=100 it collects
// every few megabytes and the collector takes about a tenth of its CPU
// (orchestrate bench, cpu_us_per_turn; docs/bench.md). At 400 the heap may
// grow to five times the live data between collections instead of twice.
// GOGC=100 (or any value, or off) in the environment overrides it, as does
// GOMEMLIMIT for a memory ceiling.
const defaultGCPercent = 400

func init() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}
