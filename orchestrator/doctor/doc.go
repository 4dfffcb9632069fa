// Package doctor checks, before any work, that every server a recipe
// names answers and serves what the recipe asks for (Run: every check,
// each failure with its fix), and Preflight, the fast subset a run makes
// before its first step.
package doctor
