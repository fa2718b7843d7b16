// Command taskmesh is the one Taskmesh binary: each service as a
// subcommand, everything in one process on embedded defaults (dev), and the
// operator tools (ctl, replay, bench).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/platform/gcdefaults"
)

func main() {
	if code, ok := executorShim(os.Args); ok {
		os.Exit(code)
	}
	// Collect less often than Go's default, within the cgroup's memory
	// limit; GOGC and GOMEMLIMIT in the environment still win.
	gcdefaults.Set()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := rootCommand()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "taskmesh:", err)
		os.Exit(1)
	}
}

// rootCommand is the taskmesh command with every subcommand.
func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "taskmesh",
		Short:         "Taskmesh: a control plane for GPU workloads",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.SetVersionTemplate(versionLine() + "\n")
	root.AddCommand(versionCommand(), benchCommand(), devCommand(), schedulerCommand(), gatewayCommand(), executorCommand(),
		replayCommand(), ctlCommand(), quotaCommand(), consumersCommand(), brokerCommand(), chaosCommand())
	return root
}
