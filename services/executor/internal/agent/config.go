package agent

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
)

// Config is the agent's configuration; see the public executor.Config for
// the meaning of each field. Zero values get the documented defaults from
// withDefaults.
type Config struct {
	AgentID, MachineID string
	Labels             []string
	Slots              int
	Types              []string
	Server             string
	Token              string
	TLS                *tls.Config
	DataDir            string
	WorkRoot           string
	ClaimWait          time.Duration
	HeartbeatInterval  time.Duration
	RenewInterval      time.Duration
	GracePeriod        time.Duration
	OutputLimit        int64
	AllowedCommands    []string
	BlockedPatterns    []string
	MemoryLimitBytes   int64
	CPULimitSeconds    int64
	LocalAPIAddr       string
	OrphanGrace        time.Duration
	Logger             *slog.Logger
	Now                func() time.Time

	// ShimCommand starts the shim: the agent appends "serve -dir <run dir>".
	// Default: this executable with "executor shim" (the taskmesh binary's
	// subcommand; tests re-execute the test binary the same way).
	ShimCommand []string
	// RPCTimeout bounds every server call but the long-poll claim
	// (default 10 s).
	RPCTimeout time.Duration
	// NoopConcurrency bounds noop tasks in flight (default 16 × Slots).
	NoopConcurrency int
}

// Defaults.
const (
	DefaultSlots             = 4
	DefaultClaimWait         = 30 * time.Second
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultRenewInterval     = 60 * time.Second
	DefaultGracePeriod       = 30 * time.Second
	DefaultOutputLimit       = 16 << 20
	DefaultLocalAPIAddr      = "127.0.0.1:7071"
	DefaultOrphanGrace       = 10 * time.Second
	// MaxOrphanGrace keeps the orphan grace below the ~15 s after which the
	// server re-leases a silent agent's tasks: a task must be dead before
	// its next attempt can start elsewhere.
	MaxOrphanGrace = 14 * time.Second
)

func (c Config) withDefaults() (Config, error) {
	if c.AgentID == "" {
		return c, errors.New("agent id is required")
	}
	if c.DataDir == "" {
		return c, errors.New("data dir is required")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, err
	}
	c.DataDir = abs
	if c.MachineID == "" {
		c.MachineID = c.AgentID
	}
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	if len(c.Types) == 0 {
		c.Types = []string{policy.TypeShell, policy.TypePython, policy.TypeScript, policy.TypeNoop}
	}
	if c.WorkRoot == "" {
		c.WorkRoot = filepath.Join(c.DataDir, "work")
	}
	if c.WorkRoot, err = filepath.Abs(c.WorkRoot); err != nil {
		return c, err
	}
	if c.ClaimWait <= 0 {
		c.ClaimWait = DefaultClaimWait
	}
	if c.ClaimWait > 60*time.Second {
		c.ClaimWait = 60 * time.Second // the server refuses longer waits
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.RenewInterval <= 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.GracePeriod <= 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.OutputLimit <= 0 {
		c.OutputLimit = DefaultOutputLimit
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.OrphanGrace > MaxOrphanGrace {
		return c, errors.New("orphan grace must stay below the server's dead-agent timeout (14s at most)")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if len(c.ShimCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return c, err
		}
		c.ShimCommand = []string{exe, "executor", "shim"}
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = 10 * time.Second
	}
	if c.NoopConcurrency <= 0 {
		c.NoopConcurrency = 16 * c.Slots
	}
	return c, nil
}
