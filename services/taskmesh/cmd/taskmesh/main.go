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

// serverTimerSlack gives the long-running process that args start its
// coarser timer slack (platform/timerslack), executing the program again
// when it must, and leaves every other command alone. They are the
// control plane's services, the broker, the executor, dev (all of them in
// one process) and the benchmarks, which run the services as they are
// deployed. What those start for users (shims and their tasks, managed
// services) and Postgres start with the slack the process was started
// with (timerslack.StartChild): a task's timers are its user's.
func serverTimerSlack(args []string) error {
	if len(args) < 2 {
		return nil
	}
	if len(args) >= 3 && args[1] == "executor" && args[2] == "shim" {
		return nil // a shim is its tasks' parent (executorShim runs it first anyway)
	}
	switch args[1] {
	case "gateway", "scheduler", "quota", "consumers", "broker", "executor", "dev", "bench":
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
