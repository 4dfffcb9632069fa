package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hindsearch/hindsearch/recipes"
)

func newRecipeCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "recipe", Short: "Work with recipes"}
	var rf recipeFlags
	check := &cobra.Command{
		Use:   "check RECIPE",
		Short: "Validate a recipe and print it resolved (defaults, base chain, ORCH_ environment, --set), secrets redacted",
		Long: `Resolve RECIPE as every command does (the defaults, then its base: chain with
the deepest base first, then the file, then ORCH_ environment variables, then
--set), validate it, and print the flat result as YAML with secrets in URLs
redacted: the form saved as recipe.yaml in each run directory. When RECIPE
names a base, a first comment line lists the files layered, in order.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, files, err := recipes.LoadChain(args[0], rf.sets, e.environ)
			if err != nil {
				return err
			}
			if err := r.MissingData(); err != nil {
				// The recipe is valid; this machine lacks its data.
				fmt.Fprintf(e.stderr, "note: %v\n", err)
			}
			red := r.Redacted()
			y, err := red.YAML()
			if err != nil {
				return err
			}
			if len(files) > 1 {
				// A comment, so that the output still loads as a recipe.
				if _, err := fmt.Fprintf(e.stdout, "# layered over the defaults, in order: %s\n", strings.Join(files, ", ")); err != nil {
					return err
				}
			}
			_, err = e.stdout.Write(y)
			return err
		},
	}
	rf.register(check.Flags())
	cmd.AddCommand(check)
	return cmd
}
