// Command taskmesh is the one Taskmesh binary: each service as a
// subcommand, everything in one process on embedded defaults (dev), and the
// operator tools (ctl, replay, bench).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/platform/gcdefaults"
	"github.com/taskmesh/taskmesh/platform/timerslack"
)

func main() {
	if code, ok := executorShim(os.Args); ok {
		os.Exit(code)
	}
	// A server that cannot have its timer slack runs on without; one
	// configured with a slack that makes no sense does not start.
	if err := serverTimerSlack(os.Args); errors.Is(err, timerslack.ErrNotApplied) {
		fmt.Fprintln(os.Stderr, "taskmesh: warning:", err)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "taskmesh:", err)
		os.Exit(1)
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

// serverTimerSlack gives the server that args start its coarser timer
// slack (platform/timerslack), executing the program again when it must,
// and leaves every other command alone. The servers are the control
// plane's services and the broker; not the executor, nor dev with its
// agent: the tasks they start would inherit the slack, and a task's
// timers are its user's.
func serverTimerSlack(args []string) error {
	if len(args) < 2 {
		return nil
	}
	switch args[1] {
	case "gateway", "scheduler", "quota", "consumers", "broker":
		return timerslack.Ensure()
	}
	return nil
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
