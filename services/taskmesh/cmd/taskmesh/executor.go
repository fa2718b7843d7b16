package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
	return 0, false
}

func executorCommand() *cobra.Command {
	var (
		cfg                             executor.Config
		labels, types, allowed, blocked string
		tokenFile, logFormat            string
	)
	cmd := &cobra.Command{
		Use:     "executor",
		Aliases: []string{"agent"},
		Short:   "Run an executor agent: pull tasks from Taskmesh and run them on this machine",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagenv.Apply(cmd.Flags()); err != nil {
				return err
			}
			var err error
			if cfg.Token, err = flagenv.Secret(cfg.Token, tokenFile); err != nil {
				return err
			}
			split := func(s string) []string {
				if s == "" {
					return nil
				}
				return strings.Split(s, ",")
			}
			cfg.Labels, cfg.Types, cfg.AllowedCommands, cfg.BlockedPatterns = split(labels), split(types), split(allowed), split(blocked)
			var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
			if logFormat == "json" {
				h = slog.NewJSONHandler(os.Stderr, nil)
			}
			cfg.Logger = slog.New(h).With("service", "executor", "agent", cfg.AgentID)
			if cfg.AgentID == "" {
				return fmt.Errorf("--agent-id is required")
			}
			return executor.Run(cmd.Context(), cfg)
		},
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&cfg.AgentID, "agent-id", "", "this agent's id (its token is bound to it)")
	f.StringVar(&cfg.MachineID, "machine-id", host, "this machine's id")
	f.StringVar(&labels, "labels", "", "comma-separated machine labels, e.g. gpu:a100,region:us-east")
	f.IntVar(&cfg.Slots, "slots", 4, "tasks run at once")
	f.StringVar(&types, "types", "", "task types to run (default shell,python,script,noop, and video when ffmpeg is installed)")
	f.StringVar(&cfg.VideoFFmpeg, "video-ffmpeg", "", "ffmpeg executable of the video runner (default: ffmpeg on PATH)")
	f.StringVar(&cfg.VideoFont, "video-font", "", "font file for video title cards and the watermark (default: a CJK font from fontconfig)")
	f.StringVar(&cfg.Server, "server", "127.0.0.1:9090", "gRPC front door of Taskmesh")
	f.StringVar(&cfg.Token, "token", "", "agent token (prefer --token-file or TASKMESH_TOKEN)")
	f.StringVar(&tokenFile, "token-file", "", "file holding the agent token")
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/taskmesh-agent", "journal and run directories")
	f.StringVar(&cfg.WorkRoot, "work-root", "", "base of default working directories (default <data-dir>/work)")
	f.DurationVar(&cfg.ClaimWait, "claim-wait", 30*time.Second, "long-poll wait per claim")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 5*time.Second, "machine heartbeat interval")
	f.Int64Var(&cfg.OutputLimit, "output-limit", 16<<20, "bytes kept per output stream")
	f.StringVar(&allowed, "allowed-commands", "", "comma-separated command names allowed to run (empty: any)")
	f.StringVar(&blocked, "blocked-patterns", "", "comma-separated substrings refused in command lines")
	f.Int64Var(&cfg.MemoryLimitBytes, "memory-limit", 0, "per-task address-space limit in bytes (0: none)")
	f.Int64Var(&cfg.CPULimitSeconds, "cpu-limit", 0, "per-task CPU-time limit in seconds (0: none)")
	f.StringVar(&cfg.LocalAPIAddr, "local-api", executor.DefaultLocalAPIAddr, "agent-local REST API address (empty: off)")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}
