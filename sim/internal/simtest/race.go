//go:build race

package simtest

// Race reports whether the race detector is on.
const Race = true
