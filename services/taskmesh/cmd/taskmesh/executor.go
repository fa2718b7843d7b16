package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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
	cfg                             executor.Config
	labels, types, allowed, blocked string
	tokenFile, logFormat            string
	backend, priorityClasses        string
	k8s                             executor.KubernetesConfig
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
	f.addAgent(cmd.Flags())
	f.addKubernetes(cmd.Flags())
	return cmd
}

// run runs the backend --backend names.
func (e *executorFlags) run(ctx context.Context) error {
	cfg, err := e.config()
	if err != nil {
		return err
	}
	switch e.backend {
	case "process":
		return executor.Run(ctx, cfg)
	case "kubernetes":
		k8s := e.k8s
		k8s.AgentID, k8s.MachineID, k8s.Labels = cfg.AgentID, cfg.MachineID, cfg.Labels
		k8s.Server, k8s.Token, k8s.Logger = cfg.Server, cfg.Token, cfg.Logger
		if k8s.PriorityClasses, err = keyValues(e.priorityClasses); err != nil {
			return fmt.Errorf("--k8s-priority-classes: %w", err)
		}
		return executor.RunKubernetes(ctx, k8s)
	}
	return fmt.Errorf("--backend %q: want process or kubernetes", e.backend)
}

// config is the agent's configuration, the part both backends share.
func (e *executorFlags) config() (executor.Config, error) {
	cfg := e.cfg
	var err error
	if cfg.Token, err = flagenv.Secret(cfg.Token, e.tokenFile); err != nil {
		return executor.Config{}, err
	}
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	cfg.Labels, cfg.Types, cfg.AllowedCommands, cfg.BlockedPatterns = split(e.labels), split(e.types), split(e.allowed), split(e.blocked)
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if e.logFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, nil)
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
	f.StringVar(&cfg.Server, "server", "127.0.0.1:9090", "gRPC front door of Taskmesh")
	f.StringVar(&cfg.Token, "token", "", "agent token (prefer --token-file or TASKMESH_TOKEN)")
	f.StringVar(&e.tokenFile, "token-file", "", "file holding the agent token")
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/taskmesh-agent", "journal and run directories")
	f.StringVar(&cfg.WorkRoot, "work-root", "", "base of default working directories (default <data-dir>/work)")
	f.DurationVar(&cfg.ClaimWait, "claim-wait", 30*time.Second, "long-poll wait per claim")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 5*time.Second, "machine heartbeat interval")
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
	f.StringVar(&e.backend, "backend", "process", "process (run tasks on this machine) or kubernetes (video tasks as PyTorchJobs)")
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
	f.StringVar(&e.priorityClasses, "k8s-priority-classes", "premium=taskmesh-premium,standard=taskmesh-standard",
		"LocalQueue=WorkloadPriorityClass pairs, comma-separated")
	f.IntVar(&k8s.GPUsPerReplica, "k8s-gpus-per-replica", 2, "most GPUs of one PyTorchJob replica; larger tasks get Workers")
}

// keyValues parses "a=b,c=d".
func keyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q is not queue=class", kv)
		}
		out[k] = v
	}
	return out, nil
}
