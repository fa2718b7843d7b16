package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/services/taskmesh/internal/ctl"
)

// ctlCommand hands everything after "ctl" to ctl.Main, which parses it
// with ctl's own command tree. ctl exits 2 on usage errors and prints its
// errors as one "error: …" line, neither of which the root command's
// error handling (print "taskmesh: …", exit 1) would do.
func ctlCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:                "ctl",
		Short:              "Manage tasks through the gateway (taskmesh ctl tasks --help)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := ctl.Main(cmd.Context(), args, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()); code != 0 {
				os.Exit(code)
			}
			return nil
		},
	}
	// "taskmesh help ctl" shows ctl's own help, with its subcommands.
	cmd.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		ctl.Main(cmd.Context(), []string{"--help"}, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}
