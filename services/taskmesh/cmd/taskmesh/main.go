// Command taskmesh is the one Taskmesh binary: each service as a
// subcommand, everything in one process on embedded defaults (dev), and the
// operator tools (ctl, replay, bench).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	if code, ok := executorShim(os.Args); ok {
		os.Exit(code)
	}
	if os.Getenv("GOGC") == "" {
		// The services allocate briskly (protobuf, JSON, pgx buffers) but
		// keep small heaps: collecting half as often buys throughput for
		// little memory. GOGC in the environment still wins.
		debug.SetGCPercent(200)
	}
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
