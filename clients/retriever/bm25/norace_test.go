//go:build !race

package bm25

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
