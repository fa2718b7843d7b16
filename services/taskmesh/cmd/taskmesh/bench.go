package main

import (
	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/services/taskmesh/internal/bench"
)

func benchCommand() *cobra.Command {
	var events bench.EventsOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Taskmesh on this machine beside a ceiling or peer measured in the same run",
	}
	eventsCmd := &cobra.Command{
		Use:   "events",
		Short: "Event store → outbox relay → Kafka → projection, against pgbench -N on the same server",
		RunE: func(cmd *cobra.Command, _ []string) error {
			events.Out = cmd.OutOrStdout()
			_, err := bench.Events(cmd.Context(), events)
			return err
		},
	}
	f := eventsCmd.Flags()
	f.StringVar(&events.Dir, "dir", ".taskmesh/bench", "work directory (on the disk under test, not tmpfs)")
	f.IntVar(&events.Runs, "runs", 3, "repetitions (medians are reported)")
	f.IntVar(&events.Writers, "writers", 8, "concurrent writing transactions")
	f.IntVar(&events.Aggregates, "aggregates", 10_000, "aggregates the writers spread over")
	f.IntVar(&events.Events, "events", 40_000, "events per throughput run")
	f.IntVar(&events.Rate, "rate", 2000, "events/s of the lag run")
	f.DurationVar(&events.LagFor, "lag-for", 0, "length of the lag run (default 10s)")
	f.DurationVar(&events.PgbenchFor, "pgbench-for", 0, "length of each pgbench run (default 10s)")

	all := &cobra.Command{
		Use:   "all",
		Short: "Run every benchmark",
		RunE: func(cmd *cobra.Command, _ []string) error {
			events.Out = cmd.OutOrStdout()
			_, err := bench.Events(cmd.Context(), events)
			return err
		},
	}
	all.Flags().AddFlagSet(f)
	cmd.AddCommand(eventsCmd, all)
	return cmd
}
