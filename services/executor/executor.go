// Package executor is the Taskmesh executor agent (seed 004 §4–§6): it pulls
// tasks from the Taskmesh LeaseService over gRPC, runs them on this machine
// through shim processes that outlive the agent, renews their leases,
// reports progress and results, and keeps a SQLite journal so that it
// survives restarts and server outages. It also serves the agent-local REST
// API of seed 004 §5.2.
//
// The taskmesh binary composes it: `taskmesh executor` calls Run, and
// `taskmesh executor shim ...` calls Shim.
package executor

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/agent"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// DefaultLocalAPIAddr is where the agent-local API listens by default. The
// zero Config leaves the API off; command lines should default to this.
const DefaultLocalAPIAddr = agent.DefaultLocalAPIAddr

// Config configures an agent. Zero durations and sizes take the defaults
// noted.
type Config struct {
	AgentID, MachineID string
	// Labels this machine has, e.g. "gpu:a100".
	Labels []string
	// Slots is the number of task processes run at once (default 4).
	Slots int
	// Types of tasks this agent runs (default shell, python, script, noop).
	Types []string
	// Server is the gRPC target of the Taskmesh front door (host:port);
	// empty runs local tasks only.
	Server string
	// Token is sent as "authorization: Bearer <token>" on every call; it is
	// never logged and never passed to tasks.
	Token string
	// TLS for the server connection; nil is plaintext (loopback dev).
	TLS *tls.Config
	// DataDir holds the journal (journal.db) and the run directories.
	DataDir string
	// WorkRoot is the base of default working directories:
	// WorkRoot/<task id> (default DataDir/work).
	WorkRoot string
	// ClaimWait is the long-poll wait of each claim (default 30 s).
	ClaimWait time.Duration
	// HeartbeatInterval of the machine heartbeat (default 5 s).
	HeartbeatInterval time.Duration
	// RenewInterval is the lease renewal interval when the task gives none
	// (default 60 s); renewal also happens before a third of the remaining
	// lease has passed.
	RenewInterval time.Duration
	// GracePeriod between SIGTERM and SIGKILL when the task gives none
	// (default 30 s).
	GracePeriod time.Duration
	// OutputLimit is the number of bytes kept per stream (default 16 MiB);
	// the rest is counted and dropped.
	OutputLimit int64
	// AllowedCommands, when not empty, lists the command base names that
	// may run ("sh" for scripts).
	AllowedCommands []string
	// BlockedPatterns are substrings refused anywhere in the command line
	// or script body.
	BlockedPatterns []string
	// MemoryLimitBytes is each task's RLIMIT_AS (0: none).
	MemoryLimitBytes int64
	// CPULimitSeconds is each task's RLIMIT_CPU (0: none).
	CPULimitSeconds int64
	// LocalAPIAddr is the address of the agent-local REST API; "" turns it
	// off (see DefaultLocalAPIAddr).
	LocalAPIAddr string
	// OrphanGrace is how long a shim keeps a task running without an agent
	// attached (default 10 s, at most 14 s: below the server's ~15 s
	// dead-agent timeout, so a task is stopped before it is re-leased).
	OrphanGrace time.Duration
	Logger      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// LogValue keeps the token out of logs when a Config is logged.
func (c Config) LogValue() slog.Value {
	c.Token = "[redacted]"
	type plain Config // drops the LogValue method: no recursion
	return slog.AnyValue(plain(c))
}

// Run runs the agent until ctx is cancelled. Running tasks stay with their
// shims when it returns; a new Run on the same DataDir reattaches to them.
func Run(ctx context.Context, cfg Config) error {
	a, err := agent.New(ctx, agent.Config{
		AgentID: cfg.AgentID, MachineID: cfg.MachineID, Labels: cfg.Labels,
		Slots: cfg.Slots, Types: cfg.Types,
		Server: cfg.Server, Token: cfg.Token, TLS: cfg.TLS,
		DataDir: cfg.DataDir, WorkRoot: cfg.WorkRoot,
		ClaimWait: cfg.ClaimWait, HeartbeatInterval: cfg.HeartbeatInterval,
		RenewInterval: cfg.RenewInterval, GracePeriod: cfg.GracePeriod,
		OutputLimit:     cfg.OutputLimit,
		AllowedCommands: cfg.AllowedCommands, BlockedPatterns: cfg.BlockedPatterns,
		MemoryLimitBytes: cfg.MemoryLimitBytes, CPULimitSeconds: cfg.CPULimitSeconds,
		LocalAPIAddr: cfg.LocalAPIAddr, OrphanGrace: cfg.OrphanGrace,
		Logger: cfg.Logger, Now: cfg.Now,
	})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// Shim runs a task process on behalf of an agent; args are what follows
// `executor shim` on the command line. It returns the exit code. The agent
// starts it by re-executing its own binary, so the binary that calls Run
// must route `executor shim ...` here.
func Shim(args []string) int {
	return shim.Main(args)
}
