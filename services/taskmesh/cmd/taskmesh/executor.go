package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/flagenv"
)

// executorShim is handled before cobra parses anything: the agent re-executes
// this binary as "taskmesh executor shim …" for every task process, and the
// shim's own arguments are not ours to parse.
func executorShim(args []string) (int, bool) {
	if len(args) >= 3 && args[1] == "executor" && args[2] == "shim" {
		return executor.Shim(args[3:]), true
	}
	// A pipeline stage task's process, and the stand-in stage programs
	// (docs/api/pipeline.md): plain processes, no flags of the root.
	if len(args) >= 2 && args[1] == "pipeline-stage" {
		return executor.PipelineStage(args[2:]), true
	}
	return 0, false
}

// executorFlags are the flags of `taskmesh executor`.
type executorFlags struct {
	cfg                              executor.Config
	labels, types, allowed, blocked  string
	tokenFile, logFormat             string
	backend, priorityClasses         string
	k8s                              executor.KubernetesConfig
	slurm                            executor.SlurmConfig
	slurmQoS, slurmNodeAgents        string
	s3AccessKeyFile, s3SecretKeyFile string
	configFile                       string
	isolation                        isolationFlags
	logFile                          executor.LogConfig
	metrics                          metricsFlags
}

// isolationFlags are the sandbox and cleanup flags; each one given wins
// over the configuration file.
type isolationFlags struct {
	sandbox, user               string
	readonly, writable          []string
	maxAge, maxSize, journalAge string
	flags                       *pflag.FlagSet
}

func executorCommand() *cobra.Command {
	var f executorFlags
	cmd := &cobra.Command{
		Use:     "executor",
		Aliases: []string{"agent"},
		Short:   "Run an executor agent: pull tasks from Taskmesh and run them on this machine",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagenv.Apply(cmd.Flags()); err != nil {
				return err
			}
			return f.run(cmd.Context())
		},
	}
	f.metrics.add(cmd.Flags(), " (heartbeats, slots, spawn latency)")
	f.addAgent(cmd.Flags())
	f.addIsolation(cmd.Flags())
	f.addKubernetes(cmd.Flags())
	f.addSlurm(cmd.Flags())
	return cmd
}

// run serves the metrics (--metrics-addr) while the backend runs.
func (e *executorFlags) run(ctx context.Context) error {
	cfg, err := e.config()
	if err != nil {
		return err
	}
	return e.metrics.serve(ctx, "executor", cfg.Logger, func(ctx context.Context, _ http.Handler) error {
		return e.runBackend(ctx, cfg)
	})
}

// runBackend runs the backend --backend names.
func (e *executorFlags) runBackend(ctx context.Context, cfg executor.Config) (err error) {
	switch e.backend {
	case "process":
		return executor.Run(ctx, cfg)
	case "kubernetes":
		k8s := e.k8s
		k8s.AgentID, k8s.MachineID, k8s.Labels = cfg.AgentID, cfg.MachineID, cfg.Labels
		k8s.Server, k8s.Token, k8s.Logger = cfg.Server, cfg.Token, cfg.Logger
		k8s.AgentLostAfter, k8s.HeartbeatInterval = cfg.AgentLostAfter, cfg.HeartbeatInterval
		if k8s.PriorityClasses, err = keyValues(e.priorityClasses); err != nil {
			return fmt.Errorf("--k8s-priority-classes: %w", err)
		}
		if k8s.S3AccessKey, err = flagenv.Secret("", e.s3AccessKeyFile); err != nil {
			return err
		}
		if k8s.S3SecretKey, err = flagenv.Secret("", e.s3SecretKeyFile); err != nil {
			return err
		}
		return executor.RunKubernetes(ctx, k8s)
	case "slurm":
		return e.runSlurm(ctx, cfg)
	}
	return fmt.Errorf("--backend %q: want process, kubernetes or slurm", e.backend)
}

// runSlurm runs the Slurm backend with the agent's identity and server.
func (e *executorFlags) runSlurm(ctx context.Context, cfg executor.Config) error {
	s := e.slurm
	s.AgentID, s.MachineID, s.Labels, s.Types = cfg.AgentID, cfg.MachineID, cfg.Labels, cfg.Types
	s.Server, s.Token, s.Logger = cfg.Server, cfg.Token, cfg.Logger
	s.HeartbeatInterval, s.AgentLostAfter = cfg.HeartbeatInterval, cfg.AgentLostAfter
	var err error
	if s.QoS, err = executor.ParseSlurmQoS(e.slurmQoS); err != nil {
		return fmt.Errorf("--slurm-qos: %w", err)
	}
	if s.NodeAgents, err = pairs(e.slurmNodeAgents, "node=address"); err != nil {
		return fmt.Errorf("--slurm-node-agents: %w", err)
	}
	// The attempt records live beside an agent's journal.
	s.StateDir = filepath.Join(cfg.DataDir, "slurm")
	return executor.RunSlurm(ctx, s)
}

// config is the agent's configuration, the part both backends share.
func (e *executorFlags) config() (executor.Config, error) {
	cfg := e.cfg
	var err error
	if cfg.Token, err = flagenv.Secret(cfg.Token, e.tokenFile); err != nil {
		return executor.Config{}, err
	}
	// Reread after a rotation: the operator writes the new secret there.
	cfg.TokenFile = e.tokenFile
	if err := e.isolation.apply(&cfg, e.configFile, &e.logFile); err != nil {
		return executor.Config{}, err
	}
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	cfg.Labels, cfg.Types = split(e.labels), split(e.types)
	// The allow-list flags win over the file's lists when given, even
	// empty (--allowed-commands "" lifts the file's list).
	if e.configFile == "" || e.isolation.flags.Changed("allowed-commands") {
		cfg.AllowedCommands = split(e.allowed)
	}
	if e.configFile == "" || e.isolation.flags.Changed("blocked-patterns") {
		cfg.BlockedPatterns = split(e.blocked)
	}
	out, err := e.logOutput()
	if err != nil {
		return executor.Config{}, err
	}
	var h slog.Handler = slog.NewTextHandler(out, nil)
	if e.logFormat == "json" {
		h = slog.NewJSONHandler(out, nil)
	}
	cfg.Logger = slog.New(h).With("service", "executor", "agent", cfg.AgentID)
	if cfg.AgentID == "" {
		return executor.Config{}, fmt.Errorf("--agent-id is required")
	}
	return cfg, nil
}

func (e *executorFlags) addAgent(f *pflag.FlagSet) {
	cfg := &e.cfg
	host, _ := os.Hostname()
	f.StringVar(&cfg.AgentID, "agent-id", "", "this agent's id (its token is bound to it)")
	f.StringVar(&cfg.MachineID, "machine-id", host, "this machine's id")
	f.StringVar(&e.labels, "labels", "", "comma-separated machine labels, e.g. gpu:a100,region:us-east")
	f.IntVar(&cfg.Slots, "slots", 4, "tasks run at once")
	f.StringVar(&e.types, "types", "", "task types to run (default shell,python,script,noop, and video when ffmpeg is installed)")
	f.StringVar(&cfg.VideoFFmpeg, "video-ffmpeg", "", "ffmpeg executable of the video runner (default: ffmpeg on PATH)")
	f.StringVar(&cfg.VideoFont, "video-font", "", "font file for video title cards and the watermark (default: a CJK font from fontconfig)")
	f.StringVar(&cfg.Server, "server", "127.0.0.1:9090", "gRPC front door of Taskmesh: host:port, or several separated by commas (the next is used while one is down)")
	f.StringVar(&cfg.Token, "token", "", "agent token (prefer --token-file or TASKMESH_TOKEN)")
	f.StringVar(&e.tokenFile, "token-file", "", "file holding the agent token (reread after a rotation)")
	f.StringVar(&cfg.SourceAddr, "source-address", "", "local address to connect to the server from (default: the system's choice)")
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/taskmesh-agent", "journal and run directories")
	f.StringVar(&cfg.WorkRoot, "work-root", "", "base of default working directories (default <data-dir>/work)")
	f.DurationVar(&cfg.ClaimWait, "claim-wait", 30*time.Second, "long-poll wait per claim")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 5*time.Second, "machine heartbeat interval")
	f.DurationVar(&cfg.AgentLostAfter, "agent-lost-after", 15*time.Second,
		"the scheduler's --agent-lost-after: tasks outlive this agent's restart for two thirds of it, and are stopped before the scheduler leases them elsewhere")
	f.Int64Var(&cfg.OutputLimit, "output-limit", 16<<20, "bytes kept per output stream")
	f.StringVar(&e.allowed, "allowed-commands", "", "comma-separated command names allowed to run (empty: any)")
	f.StringVar(&e.blocked, "blocked-patterns", "", "comma-separated substrings refused in command lines")
	f.Int64Var(&cfg.MemoryLimitBytes, "memory-limit", 0, "per-task address-space limit in bytes (0: none)")
	f.Int64Var(&cfg.CPULimitSeconds, "cpu-limit", 0, "per-task CPU-time limit in seconds (0: none)")
	f.StringVar(&cfg.LocalAPIAddr, "local-api", executor.DefaultLocalAPIAddr, "agent-local REST API address (empty: off)")
	f.StringVar(&e.logFormat, "log-format", "text", "text or json")
}

// addKubernetes adds the flags of the Kubernetes backend: video tasks as
// PyTorchJobs queued by Kueue.
func (e *executorFlags) addKubernetes(f *pflag.FlagSet) {
	k8s := &e.k8s
	f.StringVar(&e.backend, "backend", "process", "process (run tasks on this machine), kubernetes (video tasks as PyTorchJobs) or slurm (tasks placed by Slurm)")
	f.StringVar(&k8s.Kubeconfig, "kubeconfig", "", "kubeconfig file of the kubernetes backend (default: in-cluster service account)")
	f.StringVar(&k8s.Namespace, "k8s-namespace", "default", "namespace of the PyTorchJobs and the Kueue LocalQueues")
	f.IntVar(&k8s.Slots, "k8s-slots", 16, "PyTorchJobs one kubernetes backend holds at once")
	f.StringVar(&k8s.Image, "k8s-image", "", "model image of the PyTorchJobs (default the reference wan22 image)")
	f.StringVar(&k8s.S3Endpoint, "s3-endpoint", "", "S3 endpoint the PyTorchJobs upload videos to")
	f.StringVar(&k8s.S3Bucket, "s3-bucket", "", "S3 bucket of the videos")
	f.StringVar(&k8s.S3Secret, "s3-secret", "s3-credentials", "Secret holding S3_ACCESS_KEY and S3_SECRET_KEY")
	f.StringVar(&k8s.ModelRoot, "k8s-model-root", "/data/Wan-AI", "host directory of the model checkpoints")
	f.StringVar(&k8s.OutputRoot, "k8s-output-root", "/data/Wan-AI/output", "host directory the videos are written to")
	f.StringVar(&k8s.DefaultQueue, "k8s-default-queue", "standard", "Kueue LocalQueue of tasks that name no queue")
	// The video API's tier queues and their premium and standard aliases
	// (deployments/kubernetes/kueue/).
	f.StringVar(&e.priorityClasses, "k8s-priority-classes",
		"tenant-high-priority-queue=taskmesh-premium,tenant-low-priority-queue=taskmesh-standard,premium=taskmesh-premium,standard=taskmesh-standard",
		"LocalQueue=WorkloadPriorityClass pairs, comma-separated")
	f.IntVar(&k8s.GPUsPerReplica, "k8s-gpus-per-replica", 2, "most GPUs of one PyTorchJob replica; larger tasks get Workers")
	f.BoolVar(&k8s.UploadVideos, "k8s-upload-videos", true, "upload each succeeded job's video from the bucket as the task's result (served as video_url)")
	f.StringVar(&k8s.S3Region, "s3-region", "", "region of the videos' bucket")
	f.StringVar(&e.s3AccessKeyFile, "s3-access-key-file", "", "file holding the access key that reads the videos' bucket (default: the environment's)")
	f.StringVar(&e.s3SecretKeyFile, "s3-secret-key-file", "", "file holding the secret key that reads the videos' bucket")
}

// addSlurm adds the flags of the Slurm backend (docs/slurm.md).
func (e *executorFlags) addSlurm(f *pflag.FlagSet) {
	s := &e.slurm
	f.StringVar(&s.RESTEndpoint, "slurmrestd", "", "slurmrestd of the slurm backend: unix:/path/slurmrestd.sock or http(s)://host:port")
	f.StringVar(&s.RESTVersion, "slurm-api-version", "", "slurmrestd API version, v0.0.38 or v0.0.40 and later (default: the newest slurmrestd offers)")
	f.StringVar(&s.RESTUser, "slurm-user", "", "user name sent with the JWT (X-SLURM-USER-NAME)")
	f.StringVar(&s.RESTTokenFile, "slurm-token-file", "", "file holding the JWT for slurmrestd over TCP (re-read when it changes)")
	f.StringVar(&s.Mode, "slurm-mode", "placement", "placement (a placeholder job; the task runs on the allocated node's agent) or batch (the task is the job)")
	f.StringVar(&s.Partition, "slurm-partition", "", "partition of the jobs (default: the cluster's default partition)")
	f.StringVar(&s.JobDir, "slurm-job-dir", "", "directory shared with the nodes: batch output and work directories (placement: where placeholders run, default /tmp)")
	f.IntVar(&s.Slots, "slurm-slots", 64, "Slurm jobs one backend holds at once, pending or running")
	f.StringVar(&s.Priority, "slurm-priority", "nice", "how task priority reaches Slurm: nice (anyone), absolute (operators) or off")
	f.IntVar(&s.PriorityStep, "slurm-priority-step", 100, "Slurm priority (or nice) one task priority level is worth")
	f.StringVar(&e.slurmQoS, "slurm-qos", "", "QoS by task priority, e.g. 1-3=high,4-10=normal")
	f.Int64Var(&s.DefaultMemoryMB, "slurm-default-memory", 0, "MB of memory asked for a task that names none (0: the partition's default)")
	f.StringVar(&e.slurmNodeAgents, "slurm-node-agents", "", "node=address of each node's Taskmesh agent local API, comma-separated (placement)")
	f.StringVar(&s.NodeAgentURL, "slurm-node-agent-url", "", "local API address of the other nodes' agents, with {node}, e.g. http://{node}:7071 (placement)")
	f.DurationVar(&s.PollInterval, "slurm-poll-interval", time.Second, "how often slurmctld's job list is read")
	f.DurationVar(&s.PendingPollInterval, "slurm-pending-poll-interval", 100*time.Millisecond,
		"how often slurmctld's job list is read while a job waits to start and the backend's jobs are moving (with --slurm-start-signal too: a listing can see a start before its signal)")
	f.StringVar(&s.StartSignalListen, "slurm-start-signal", "",
		"placement: host:port to take placeholders' start signals on, so a start is seen without waiting for a job listing; the nodes need /bin/bash (e.g. 10.0.0.2:7090)")
	f.StringVar(&s.StartSignalAddr, "slurm-start-signal-addr", "", "host:port the nodes reach the start signal at (default: the --slurm-start-signal address)")
}

// keyValues parses "queue=class,queue=class".
func keyValues(s string) (map[string]string, error) { return pairs(s, "queue=class") }

// pairs parses "a=b,c=d"; what names the shape in errors.
func pairs(s, what string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q is not %s", kv, what)
		}
		out[k] = v
	}
	return out, nil
}

// addIsolation adds the sandbox, cleanup and log flags (the isolation,
// cleanup and log blocks of --config).
func (e *executorFlags) addIsolation(f *pflag.FlagSet) {
	i := &e.isolation
	i.flags = f
	f.StringVar(&e.configFile, "config", "", "agent configuration file with allowed_commands:, blocked_patterns:, isolation:, log: and cleanup: blocks (docs/executor.md)")
	f.StringVar(&i.sandbox, "isolation", "none", "task sandbox: none or bwrap (bubblewrap, tasks as an unprivileged user)")
	f.StringVar(&i.user, "isolation-user", "nobody", "the user sandboxed tasks run as")
	f.StringSliceVar(&i.readonly, "isolation-readonly-paths", nil, "paths a sandboxed task sees read-only (default /usr,/bin,/sbin,/lib,/lib64,/etc)")
	f.StringSliceVar(&i.writable, "isolation-writable-paths", nil, "paths a sandboxed task may write besides its work directory")
	f.BoolVar(&e.cfg.NoCgroups, "no-cgroups", false, "limit tasks' resources with rlimits even where cgroups could be made")
	f.IntVar(&e.cfg.ClaimAhead, "claim-ahead", 0, "tasks claimed beyond the free slots while recent tasks ran under 500ms (0: none; for machines that run floods of short tasks)")
	f.StringVar(&e.cfg.ShimPath, "shim", "", "the shim binary (default: taskmesh-shim beside this binary, else this binary re-executed, which starts slower)")
	f.BoolVar(&e.cfg.ShimPerTask, "shim-per-task", false, "start a shim process for every task instead of one shim host serving them all")
	f.StringVar(&i.maxAge, "cleanup-max-age", "", "remove delivered tasks' run and work directories after this age (default 7d)")
	f.StringVar(&i.maxSize, "cleanup-max-size", "", "keep run and work directories under this size, oldest removed first (default 10GB)")
	f.StringVar(&i.journalAge, "journal-max-age", "", "prune delivered journal entries after this age (default 7d)")
	f.StringVar(&e.logFile.LocalDir, "log-dir", "", "write the agent's log to <dir>/agent.log, rotated (default: standard error)")
	f.IntVar(&e.logFile.MaxSizeMB, "log-max-size-mb", logfileDefaultMB, "rotate the log file at this size")
	f.IntVar(&e.logFile.RetainCount, "log-retain", logfileDefaultRetain, "log files kept, the current one included")
}

// Log rotation defaults (docs/executor.md).
const (
	logfileDefaultMB     = 100
	logfileDefaultRetain = 7
)

// apply sets cfg from the configuration file, then from the flags given.
func (i *isolationFlags) apply(cfg *executor.Config, file string, log *executor.LogConfig) error {
	if file != "" {
		f, err := executor.LoadFile(file)
		if err != nil {
			return err
		}
		if err := f.Apply(cfg); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		i.logDefaults(f.Log, log)
	}
	if i.flags.Changed("isolation") || file == "" {
		cfg.Sandbox.Type, cfg.Sandbox.Enabled = i.sandbox, i.sandbox != executor.SandboxNone
	}
	if i.flags.Changed("isolation-user") || cfg.Sandbox.User == "" {
		cfg.Sandbox.User = i.user
	}
	if i.flags.Changed("isolation-readonly-paths") {
		cfg.Sandbox.ReadonlyPaths = i.readonly
	}
	if i.flags.Changed("isolation-writable-paths") {
		cfg.Sandbox.WritablePaths = i.writable
	}
	return i.cleanup(cfg)
}

// logDefaults takes the file's log block where no flag was given.
func (i *isolationFlags) logDefaults(from executor.LogConfig, to *executor.LogConfig) {
	if !i.flags.Changed("log-dir") && from.LocalDir != "" {
		to.LocalDir = from.LocalDir
	}
	if !i.flags.Changed("log-max-size-mb") && from.MaxSizeMB > 0 {
		to.MaxSizeMB = from.MaxSizeMB
	}
	if !i.flags.Changed("log-retain") && from.RetainCount > 0 {
		to.RetainCount = from.RetainCount
	}
}

// cleanup applies the cleanup flags given.
func (i *isolationFlags) cleanup(cfg *executor.Config) error {
	var err error
	if i.maxAge != "" {
		if cfg.Retention.MaxAge, err = executor.ParseAge(i.maxAge); err != nil {
			return fmt.Errorf("--cleanup-max-age: %w", err)
		}
	}
	if i.maxSize != "" {
		if cfg.Retention.MaxBytes, err = executor.ParseSize(i.maxSize); err != nil {
			return fmt.Errorf("--cleanup-max-size: %w", err)
		}
	}
	if i.journalAge != "" {
		if cfg.Retention.JournalMaxAge, err = executor.ParseAge(i.journalAge); err != nil {
			return fmt.Errorf("--journal-max-age: %w", err)
		}
	}
	return nil
}

// logOutput is the rotating log file of --log-dir (or the file's log
// block), else standard error.
func (e *executorFlags) logOutput() (io.Writer, error) {
	if e.logFile.LocalDir == "" {
		return os.Stderr, nil
	}
	w, err := executor.OpenLog(e.logFile)
	if err != nil {
		return nil, err
	}
	return w, nil
}
