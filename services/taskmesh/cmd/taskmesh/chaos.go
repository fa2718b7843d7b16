package main

import (
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/services/taskmesh/internal/chaos"
)

// chaosCommand runs the fault-injection suite (docs/chaos.md).
func chaosCommand() *cobra.Command {
	cfg := chaos.Config{}
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run Taskmesh as separate processes under load and faults, then check the invariants (docs/chaos.md)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			if cfg.RedisServer, err = exec.LookPath(cfg.RedisServer); err != nil {
				return err
			}
			cfg.Binary, cfg.Out = bin, cmd.OutOrStdout()
			rep, err := chaos.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if rep.Failed() {
				return chaos.ErrInvariant
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long the load and the faults last")
	f.DurationVar(&cfg.Drain, "drain", 3*time.Minute, "time the accepted work gets to end afterwards; while some of it keeps ending, up to as long again or the load's duration, whichever is longer")
	f.IntVar(&cfg.Rate, "rate", 50, "requests a second (tasks and task groups)")
	f.Int64Var(&cfg.Seed, "seed", 0, "seed of the fault schedule (0: a random one, printed)")
	f.BoolVar(&cfg.Short, "short", false, "shorter broker stalls and gaps between faults (runs of a minute or two)")
	f.BoolVar(&cfg.NoFaults, "no-faults", false, "run the load alone, without faults: what the deployment serves on this machine")
	f.BoolVar(&cfg.PGStats, "pg-stats", false, "load pg_stat_statements into the deployment's Postgres and print the statements that took most of its time after the drain")
	f.StringVar(&cfg.Dir, "dir", "", "keep data directories and logs here (default: a temporary directory, removed when every invariant holds)")
	f.StringVar(&cfg.RedisServer, "redis-server", "redis-server", "the redis-server executable")
	cmd.AddCommand(chaosWitnessCommand())
	return cmd
}

// chaosWitnessCommand is the process the load's stubborn tasks run: it
// takes its task's lock in --dir and holds it, ignoring SIGTERM, and
// records an overlap when another run of the task still holds it
// (docs/chaos.md, "The invariants"). Hidden: it is meant for the
// suite's agents, which set the task's ids in its environment.
func chaosWitnessCommand() *cobra.Command {
	var (
		dir  string
		hold time.Duration
	)
	cmd := &cobra.Command{
		Use:    "witness",
		Short:  "Hold this task's lock in --dir for --hold, ignoring SIGTERM; record an overlap if another run holds it, and wait for it",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return chaos.Witness(dir, hold, os.Getenv("TASKMESH_TASK_ID"), os.Getenv("TASKMESH_ATTEMPT_ID"))
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the locks and the overlap records (shared by every agent)")
	cmd.Flags().DurationVar(&hold, "hold", 8*time.Second, "how long to hold the lock")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}
