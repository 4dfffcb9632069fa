//go:build !k8s

package main

import "github.com/spf13/cobra"

// taggedCommands are the commands a build tag adds: none without one
// (the k8s build adds `endpoints`, k8s.go).
func taggedCommands(*env) []*cobra.Command { return nil }
