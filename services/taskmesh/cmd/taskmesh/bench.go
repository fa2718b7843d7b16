package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/services/taskmesh/internal/bench"
)

func benchCommand() *cobra.Command {
	var events bench.EventsOptions
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Taskmesh on this machine beside a ceiling or peer measured in the same run",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if cpuProfile == "" {
				return nil
			}
			f, err := os.Create(cpuProfile)
			if err != nil {
				return err
			}
			return pprof.StartCPUProfile(f)
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if cpuProfile != "" {
				pprof.StopCPUProfile()
			}
		},
	}
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
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

	var tasks bench.TasksOptions
	tasksCmd := &cobra.Command{
		Use:   "tasks",
		Short: "Burn-down of no-op tasks over the lease API beside River on the same server; start latency; crash recovery",
		RunE: func(cmd *cobra.Command, _ []string) error {
			tasks.Out = cmd.OutOrStdout()
			_, err := bench.Tasks(cmd.Context(), tasks)
			return err
		},
	}
	tf := tasksCmd.Flags()
	tf.StringVar(&tasks.Dir, "dir", ".taskmesh/bench", "work directory (on the disk under test, not tmpfs)")
	tf.IntVar(&tasks.Runs, "runs", 3, "repetitions (medians are reported)")
	tf.IntVar(&tasks.Tasks, "tasks", 100_000, "no-op tasks per burn-down")
	tf.IntVar(&tasks.Agents, "agents", 8, "concurrent agents")
	tf.IntVar(&tasks.ClaimBatch, "claim-batch", 200, "tasks per claim")
	tf.IntVar(&tasks.InFlight, "in-flight", 64, "completions in flight per agent")
	tf.IntVar(&tasks.Rate, "rate", 500, "tasks/s of the latency run")
	tf.DurationVar(&tasks.RateFor, "rate-for", 0, "length of the latency run (default 20s)")
	tf.IntVar(&tasks.SpawnTasks, "spawn-tasks", 1000, "/bin/true tasks run through a real executor")
	tf.IntVar(&tasks.SpawnSlots, "spawn-slots", 8, "slots of that executor")
	tf.StringVar(&tasks.BurnProfile, "burn-profile", "", "write a CPU profile of the first burn-down alone")
	tf.BoolVar(&tasks.PGStats, "pg-stats", false, "print the statements that took most server time (pg_stat_statements)")

	var gw bench.GatewayOptions
	gatewayCmd := &cobra.Command{
		Use:   "gateway",
		Short: "REST submit+get through the gateway against the same calls over gRPC straight to the scheduler",
		RunE: func(cmd *cobra.Command, _ []string) error {
			gw.Out = cmd.OutOrStdout()
			_, err := bench.Gateway(cmd.Context(), gw)
			return err
		},
	}
	gf := gatewayCmd.Flags()
	gf.StringVar(&gw.Dir, "dir", ".taskmesh/bench", "work directory (on the disk under test, not tmpfs)")
	gf.IntVar(&gw.Runs, "runs", 3, "repetitions (medians are reported)")
	gf.IntVar(&gw.Clients, "clients", 16, "concurrent clients per path")
	gf.DurationVar(&gw.For, "gateway-for", 10*time.Second, "length of each measured phase")

	var adm bench.AdmissionOptions
	admissionCmd := &cobra.Command{
		Use:   "admission",
		Short: "Quota admission end to end: pending workloads on the task topic, capacity freed as each is admitted",
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm.Out = cmd.OutOrStdout()
			_, err := bench.Admission(cmd.Context(), adm)
			return err
		},
	}
	af := admissionCmd.Flags()
	af.StringVar(&adm.Dir, "dir", ".taskmesh/bench", "work directory (on the disk under test, not tmpfs)")
	af.IntVar(&adm.Runs, "runs", 3, "repetitions (medians are reported)")
	af.IntVar(&adm.Workloads, "workloads", 10_000, "pending workloads (1 GPU each)")
	af.IntVar(&adm.Queues, "queues", 50, "ClusterQueues")
	af.IntVar(&adm.Cohorts, "cohorts", 5, "cohorts the queues are spread over")
	af.IntVar(&adm.GPUs, "queue-gpus", 20, "nominal GPUs of each queue")
	af.BoolVar(&adm.PGStats, "admission-pg-stats", false, "print the statements that took most server time (pg_stat_statements)")

	all := &cobra.Command{
		Use:   "all",
		Short: "Run every benchmark",
		RunE: func(cmd *cobra.Command, _ []string) error {
			events.Out, tasks.Out = cmd.OutOrStdout(), cmd.OutOrStdout()
			if _, err := bench.Events(cmd.Context(), events); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if _, err := bench.Tasks(cmd.Context(), tasks); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			gw.Out = cmd.OutOrStdout()
			if _, err := bench.Gateway(cmd.Context(), gw); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			adm.Out = cmd.OutOrStdout()
			_, err := bench.Admission(cmd.Context(), adm)
			return err
		},
	}
	all.Flags().AddFlagSet(f)
	for _, fs := range []*pflag.FlagSet{tf, gf, af} {
		fs.VisitAll(func(fl *pflag.Flag) {
			if all.Flags().Lookup(fl.Name) == nil {
				all.Flags().AddFlag(fl)
			}
		})
	}
	cmd.AddCommand(eventsCmd, tasksCmd, gatewayCmd, admissionCmd, all)
	return cmd
}
