package main

import (
	"github.com/spf13/cobra"
)

func newRecipeCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "recipe", Short: "Work with recipes"}
	var rf recipeFlags
	check := &cobra.Command{
		Use:   "check RECIPE",
		Short: "Validate a recipe and print it resolved (defaults, ORCH_ environment, --set), secrets redacted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := rf.load(e, args[0])
			if err != nil {
				return err
			}
			red := r.Redacted()
			y, err := red.YAML()
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(y)
			return err
		},
	}
	rf.register(check.Flags())
	cmd.AddCommand(check)
	return cmd
}
