package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/platform/sibling"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/bench"
)

// benchmark is one `taskmesh bench` subcommand: its own flags and how it
// runs with the settings every benchmark shares.
type benchmark struct {
	name, short string
	flags       *pflag.FlagSet
	run         func(ctx context.Context, c bench.Common) error
}

func benchCommand() *cobra.Command {
	return newBenchCommand([]benchmark{eventsBenchmark(), tasksBenchmark(), gatewayBenchmark(), admissionBenchmark(), pipelineBenchmark(),
		dagBenchmark(), consumersBenchmark(), slurmBenchmark()}, spawnBenchmark(), scaleBenchmark())
}

// newBenchCommand is `taskmesh bench` with a subcommand per benchmark and
// `all`, which runs them in turn. alone are subcommands `all` leaves out:
// a figure another benchmark already takes, measured by itself, or one
// too long for `all` (scale, `make bench-scale`).
func newBenchCommand(benchmarks []benchmark, alone ...benchmark) *cobra.Command {
	var common bench.Common
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
	// Shared by every benchmark, and by all of them under `bench all`.
	pf := cmd.PersistentFlags()
	pf.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	pf.StringVar(&common.Dir, "dir", ".taskmesh/bench", "work directory (on the disk under test, not tmpfs)")
	pf.IntVar(&common.Runs, "runs", 3, "repetitions: every figure is the median of the runs, printed with its spread")
	pf.BoolVar(&common.PGStats, "pg-stats", false, "load pg_stat_statements and print the statements that took most server time (tasks, spawn, dag, admission, scale, pipeline)")
	pf.StringVar(&common.ServiceLog, "service-log", "", "write the logs of the services a benchmark runs to this file (JSON)")
	for _, b := range append(slices.Clip(benchmarks), alone...) {
		sub := &cobra.Command{Use: b.name, Short: b.short, RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bench.CheckPrerequisites([]string{b.name}, bench.Installed); err != nil {
				return err
			}
			common.Out = cmd.OutOrStdout()
			warnWithoutSiblings(cmd.ErrOrStderr())
			noteAutogroups(cmd.ErrOrStderr())
			return b.run(cmd.Context(), common)
		}}
		sub.Flags().AddFlagSet(b.flags)
		cmd.AddCommand(sub)
	}
	cmd.AddCommand(benchAllCommand(&common, benchmarks), benchCheckCommand(benchmarks), &cobra.Command{
		Use:   "medians",
		Short: "Read `go test -bench … -count N` output on stdin; print each benchmark's metrics as medians of its runs",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.GoTestMedians(cmd.InOrStdin(), cmd.OutOrStdout())
		},
	})
	return cmd
}

// benchAllCommand runs every benchmark in turn with all their flags.
func benchAllCommand(common *bench.Common, benchmarks []benchmark) *cobra.Command {
	all := &cobra.Command{Use: "all", Short: "Run every benchmark", RunE: func(cmd *cobra.Command, _ []string) error {
		if err := bench.CheckPrerequisites(names(benchmarks), bench.Installed); err != nil {
			return err
		}
		common.Out = cmd.OutOrStdout()
		warnWithoutSiblings(cmd.ErrOrStderr())
		noteAutogroups(cmd.ErrOrStderr())
		for i, b := range benchmarks {
			if i > 0 {
				fmt.Fprintln(common.Out)
			}
			if err := b.run(cmd.Context(), *common); err != nil {
				return fmt.Errorf("bench %s: %w", b.name, err)
			}
		}
		return nil
	}}
	for _, b := range benchmarks {
		all.Flags().AddFlagSet(b.flags)
	}
	return all
}

// benchCheckCommand says, before anything starts, which programs `make
// bench` needs that this machine lacks, and the apt-get command that
// installs them; it succeeds when none is missing.
func benchCheckCommand(benchmarks []benchmark) *cobra.Command {
	return &cobra.Command{Use: "check", Short: "Check that every program the benchmarks run is installed; print the apt-get command for what is missing",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bench.CheckPrerequisites(append(names(benchmarks), bench.GoBenchmarks), bench.Installed); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "every program the benchmarks run is installed")
			warnWithoutSiblings(cmd.ErrOrStderr())
			noteAutogroups(cmd.ErrOrStderr())
			return nil
		}}
}

func names(benchmarks []benchmark) []string {
	out := make([]string, 0, len(benchmarks))
	for _, b := range benchmarks {
		out = append(out, b.name)
	}
	return out
}

func eventsBenchmark() benchmark {
	var o bench.EventsOptions
	f := pflag.NewFlagSet("events", pflag.ContinueOnError)
	f.IntVar(&o.Writers, "writers", 8, "concurrent writing transactions")
	f.IntVar(&o.Aggregates, "aggregates", 10_000, "aggregates the writers spread over")
	f.IntVar(&o.Events, "events", 40_000, "events per throughput run")
	f.IntVar(&o.LagRate, "lag-rate", 2000, "events/s of the projection lag run")
	f.DurationVar(&o.LagFor, "lag-for", 10*time.Second, "length of the projection lag run")
	f.DurationVar(&o.PgbenchFor, "pgbench-for", 10*time.Second, "length of each pgbench run")
	return benchmark{name: "events", flags: f,
		short: "Event store → outbox relay → Kafka → projection, against pgbench -N -M prepared on the same server",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Events(ctx, o)
			return err
		}}
}

func tasksBenchmark() benchmark {
	var o bench.TasksOptions
	f := pflag.NewFlagSet("tasks", pflag.ContinueOnError)
	f.IntVar(&o.Tasks, "tasks", 100_000, "no-op tasks per burn-down (River works as many jobs)")
	f.IntVar(&o.Agents, "agents", 8, "concurrent agents")
	f.IntVar(&o.ClaimBatch, "claim-batch", 200, "tasks per claim")
	f.IntVar(&o.InFlight, "in-flight", 64, "completions in flight per agent")
	f.IntVar(&o.StartRate, "start-rate", 500, "submissions/s of the open-loop submit → start run")
	f.DurationVar(&o.StartFor, "start-for", 20*time.Second, "length of the submit → start run")
	f.IntVar(&o.SpawnTasks, "spawn-tasks", 1000, "/bin/true tasks run through a real executor")
	f.IntVar(&o.SpawnSlots, "spawn-slots", 8, "slots of that executor")
	f.StringVar(&o.BurnProfile, "burn-profile", "", "write a CPU profile of the first burn-down alone")
	return benchmark{name: "tasks", flags: f,
		short: "Burn-down of no-op tasks over the lease API beside River on the same server; submit → start; crash recovery; process spawning",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Tasks(ctx, o)
			return err
		}}
}

// spawnBenchmark is the process spawning figure of `bench tasks` by itself.
func spawnBenchmark() benchmark {
	var o bench.TasksOptions
	f := pflag.NewFlagSet("spawn", pflag.ContinueOnError)
	f.IntVar(&o.SpawnTasks, "spawn-tasks", 1000, "/bin/true tasks run through a real executor")
	f.IntVar(&o.SpawnSlots, "spawn-slots", 8, "slots of that executor")
	return benchmark{name: "spawn", flags: f,
		short: "Process spawning alone (the last figure of bench tasks): /bin/true tasks through a real executor agent",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Spawn(ctx, o)
			return err
		}}
}

func gatewayBenchmark() benchmark {
	var o bench.GatewayOptions
	f := pflag.NewFlagSet("gateway", pflag.ContinueOnError)
	f.IntVar(&o.Clients, "clients", 16, "concurrent clients per path")
	f.DurationVar(&o.For, "gateway-for", 10*time.Second, "how long each path is measured in all")
	f.DurationVar(&o.Slice, "gateway-turn", time.Second, "the paths take turns of this length until each has run --gateway-for")
	return benchmark{name: "gateway", flags: f,
		short: "REST submit+get through the gateway against the same calls over gRPC straight to the scheduler",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Gateway(ctx, o)
			return err
		}}
}

func admissionBenchmark() benchmark {
	var o bench.AdmissionOptions
	f := pflag.NewFlagSet("admission", pflag.ContinueOnError)
	f.IntVar(&o.Workloads, "workloads", 10_000, "pending workloads (1 GPU each)")
	f.IntVar(&o.Queues, "queues", 50, "ClusterQueues")
	f.IntVar(&o.Cohorts, "cohorts", 5, "cohorts the queues are spread over")
	f.IntVar(&o.GPUs, "queue-gpus", 20, "nominal GPUs of each queue")
	return benchmark{name: "admission", flags: f,
		short: "Quota admission end to end: pending workloads on the task topic, capacity freed as each is admitted",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Admission(ctx, o)
			return err
		}}
}

func consumersBenchmark() benchmark {
	var o bench.ConsumersOptions
	f := pflag.NewFlagSet("consumers", pflag.ContinueOnError)
	f.IntVar(&o.ReplayTasks, "replay-tasks", 10_000, "tasks (5 events each) of the replay corpus")
	f.IntVar(&o.Deliveries, "deliveries", 5000, "webhook deliveries of the throughput burst")
	f.IntVar(&o.WebhookRate, "webhook-rate", 500, "deliveries/s of the webhook latency run")
	f.IntVar(&o.LagRate, "usage-rate", 2000, "task events/s of the usage lag run")
	f.DurationVar(&o.For, "consumers-for", 10*time.Second, "length of the webhook latency and usage lag runs")
	return benchmark{name: "consumers", flags: f,
		short: "Event consumers: replay rate per projection, webhook deliveries to a local receiver, usage metering lag",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Consumers(ctx, o)
			return err
		}}
}

func pipelineBenchmark() benchmark {
	var o bench.PipelineOptions
	f := pflag.NewFlagSet("pipeline", pflag.ContinueOnError)
	f.IntVar(&o.Jobs, "jobs", 200, "conversion jobs per run")
	f.IntVar(&o.Slots, "pipeline-slots", 12, "slots of the agent that serves every pool")
	f.IntVar(&o.Clients, "pipeline-clients", 8, "clients creating the jobs at once")
	return benchmark{name: "pipeline", flags: f,
		short: "Conversion jobs through the ONNX (cap 4), BIE (2) and NEF (4) pools with no-op stages: jobs/min, stage hand-off, peak per pool",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Pipeline(ctx, o)
			return err
		}}
}

func dagBenchmark() benchmark {
	var o bench.DAGOptions
	f := pflag.NewFlagSet("dag", pflag.ContinueOnError)
	f.IntVar(&o.Nodes, "dag-nodes", 1000, "DAG size: a root, dag-nodes-2 children in parallel, a merge")
	f.IntVar(&o.Agents, "dag-agents", 8, "concurrent no-op agents")
	f.IntVar(&o.ClaimBatch, "dag-claim-batch", 32, "tasks per claim")
	f.IntVar(&o.InFlight, "dag-in-flight", 16, "completions in flight per agent")
	f.IntVar(&o.RepeatRuns, "repeat-runs", 10_000, "runs of the repeat")
	f.IntVar(&o.RepeatParallel, "repeat-parallel", 100, "runs of the repeat at once")
	return benchmark{name: "dag", flags: f,
		short: "Task groups: a 1,000-node DAG of no-op tasks (total, parent → child hand-off) and a 10,000-run repeat",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.DAG(ctx, o)
			return err
		}}
}

func slurmBenchmark() benchmark {
	var o bench.SlurmOptions
	f := pflag.NewFlagSet("slurm", pflag.ContinueOnError)
	f.IntVar(&o.Jobs, "slurm-jobs", 100, "tasks (placeholder jobs held at once) and sbatch jobs of the anchor per run")
	f.IntVar(&o.Tasks, "slurm-tasks", 300, "no-op tasks of the throughput run")
	f.DurationVar(&o.Poll, "slurm-poll", 0, "the backend's poll of slurmctld's job list (0: the backend's default, 1s)")
	f.DurationVar(&o.PendingPoll, "slurm-pending-poll", 0, "the backend's poll while jobs wait to start (0: the backend's default, 100ms)")
	f.DurationVar(&o.Spread, "slurm-spread", 10*time.Second, "time the latency run's submissions are spread over")
	f.BoolVar(&o.NoStartSignal, "slurm-no-start-signal", false, "run the backend without the placeholders' start signal (starts seen by job listings only)")
	return benchmark{name: "slurm", flags: f,
		short: "Submit → Slurm RUNNING → Taskmesh running and tasks/s through the Slurm backend, beside sbatch → RUNNING on the same Slurm (needs root and Slurm)",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Slurm(ctx, o)
			return err
		}}
}

// scaleBenchmark measures a month of history against an empty database;
// loading it takes minutes, so `bench all` leaves it to `make bench-scale`.
func scaleBenchmark() benchmark {
	var o bench.ScaleOptions
	f := pflag.NewFlagSet("scale", pflag.ContinueOnError)
	f.IntVar(&o.Finished, "finished", 1_000_000, "finished tasks of the loaded history (30 days)")
	f.IntVar(&o.Pending, "pending", 100_000, "pending tasks of the loaded history, in a pool the measuring agents do not serve")
	f.IntVar(&o.Tenants, "tenants", 40, "tenants of the history")
	f.IntVar(&o.AdmissionHistory, "admission-history", 0, "finished workloads of the loaded admission layer (0: a fifth of --finished)")
	f.IntVar(&o.Rate, "scale-rate", 500, "submissions/s of the measured load")
	f.DurationVar(&o.For, "scale-for", 20*time.Second, "length of each measured load")
	f.DurationVar(&o.ListEvery, "list-every", 100*time.Millisecond, "interval of each measured listing during the load")
	f.IntVar(&o.Workloads, "scale-workloads", 10_000, "workloads of each admission measurement")
	return benchmark{name: "scale", flags: f,
		short: "A month of history (1M finished, 100k pending tasks) against an empty database: submit → start, claims, lists, projection lag, admission; loaded/empty ratios",
		run: func(ctx context.Context, c bench.Common) error {
			o.Common = c
			_, err := bench.Scale(ctx, o)
			return err
		}}
}

// warnWithoutSiblings says when the small binaries that run once per
// task are not beside this one: the benchmarks' agents would then start
// every task by re-executing this binary instead of taskmesh-shim, and
// every pipeline stage's worker and program instead of taskmesh-stage,
// and every figure with a spawned process in it is slower than a
// deployment's (`make build` puts all three in bin/).
func warnWithoutSiblings(w io.Writer) {
	var missing []string
	for _, name := range []string{sibling.Shim, sibling.Stage} {
		if sibling.OfSelf(name) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return
	}
	exe, _ := os.Executable()
	fmt.Fprintf(w, "note: no %s beside %s: tasks and pipeline stages then re-execute this binary, which starts several times slower; build them with make build and run bin/taskmesh\n",
		strings.Join(missing, " or "), exe)
}

// noteAutogroups says when the kernel schedules every session as a CPU
// group of its own (sched_autogroup_enabled) and this process sits in
// the root CPU cgroup, where those groups apply: on one machine every
// Postgres backend (each its own session) and every task's shim then
// weighs as much as all of the services together, and the latency tails
// of a benchmark that keeps the CPU busy grow with them. A deployment's
// services run in cgroups of their own (systemd units, containers),
// where the kernel does not form autogroups (docs/operations.md,
// "Benchmarks on one machine").
func noteAutogroups(w io.Writer) {
	if b, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled"); err != nil || strings.TrimSpace(string(b)) != "1" {
		return
	}
	if cg, err := os.ReadFile("/proc/self/cgroup"); err != nil || !inRootCPUCgroup(string(cg), v2Controllers) {
		return
	}
	fmt.Fprintln(w, "note: kernel.sched_autogroup_enabled=1 and the root CPU cgroup: each Postgres backend and each task is a CPU group as heavy as all the services together, which lengthens latency tails under load (docs/operations.md, \"Benchmarks on one machine\")")
}

// inRootCPUCgroup reads /proc/self/cgroup: whether the process is in the
// root of the cgroup v1 cpu hierarchy or, when there is none, in a v2
// cgroup without the cpu controller (controllers lists a v2 cgroup's),
// which the scheduler treats as the root.
func inRootCPUCgroup(procCgroup string, controllers func(path string) string) bool {
	v2 := ""
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return parts[2] == "/"
			}
		}
	}
	if v2 == "" || v2 == "/" {
		return true
	}
	return !slices.Contains(strings.Fields(controllers(v2)), "cpu")
}

// v2Controllers reads the controllers of the v2 cgroup at path.
func v2Controllers(path string) string {
	b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", path, "cgroup.controllers"))
	return string(b)
}
