package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hindsearch/hindsearch/orchestrator/roles"
	"github.com/hindsearch/hindsearch/orchestrator/setup"
	"github.com/hindsearch/hindsearch/recipes"
)

// env is what every subcommand reads from its process.
type env struct {
	stdout, stderr io.Writer
	environ        []string
}

// newRootCmd builds a fresh command tree (no global state: tests build one
// per case).
func newRootCmd(stdout, stderr io.Writer, environ []string) *cobra.Command {
	e := &env{stdout: stdout, stderr: stderr, environ: environ}
	root := &cobra.Command{
		Use:           "orchestrate",
		Short:         "Train search agents with GRPO plus hindsight critique",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newRunCmd(e), newEvalCmd(e), newAblateCmd(e), newStudyCmd(e), newBenchCmd(e), newChaosCmd(e), newRecipeCmd(e), newServeCmd(e), newResultsCmd(e), newShowCmd(e), newTrackCmd(e))
	root.AddCommand(newDoctorCmd(e), newTokenizeCmd(e), newDataCmd(e))
	// Commands of a build tag (-tags k8s: endpoints); none by default.
	root.AddCommand(taggedCommands(e)...)
	return root
}

// recipeFlags are the flags of every subcommand that takes a recipe.
type recipeFlags struct {
	sets []string
}

func (f *recipeFlags) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.sets, "set", nil, "override a recipe key: --set key=value (lists comma-separated; map entries as eval.datasets.NAME=FILE); repeatable")
}

func (f *recipeFlags) load(e *env, path string) (*recipes.Recipe, error) {
	return recipes.Load(path, f.sets, e.environ)
}

// connect loads the recipe with the flags' overrides and connects to (or
// starts) every server it names; close the returned servers when done.
func (f *recipeFlags) connect(ctx context.Context, e *env, path string, options ...setup.Option) (*recipes.Recipe, roles.Deps, *setup.Embedded, error) {
	return setup.LoadAndConnect(ctx, path, f.sets, e.environ, e.stderr, options...)
}
