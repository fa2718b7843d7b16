package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/taskmesh/taskmesh/platform/sibling"
	"github.com/taskmesh/taskmesh/services/executor/internal/fence"
	"github.com/taskmesh/taskmesh/services/executor/internal/isolation"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
)

// Settings are an agent's settings, as operators give them (the public
// executor.Config). Zero durations and sizes take the defaults noted.
type Settings struct {
	AgentID, MachineID string
	// Labels this machine has, e.g. "gpu:a100".
	Labels []string
	// Slots is the number of task processes run at once (default 4).
	Slots int
	// Types of tasks this agent runs (default shell, python, script, noop,
	// and video when ffmpeg is installed). Listing video without ffmpeg is
	// a configuration error.
	Types []string
	// VideoFFmpeg is the ffmpeg executable of the video runner (default
	// "ffmpeg" on PATH).
	VideoFFmpeg string
	// VideoFont is the font file for the title card and the watermark
	// (default: a CJK-capable font found through fontconfig).
	VideoFont string
	// Server is the gRPC target of the Taskmesh front door (host:port);
	// empty runs local tasks only.
	Server string
	// Token is sent as "authorization: Bearer <token>" on every call; it is
	// never logged and never passed to tasks.
	Token string
	// TokenFile, if set, holds the token instead: it is read at start and
	// again when the server refuses a call as unauthenticated, so a
	// rotated token written there is picked up without a restart.
	TokenFile string
	// Version is reported in heartbeats (default: the binary's build
	// version).
	Version string
	// TLS for the server connection; nil is plaintext (loopback dev).
	TLS *tls.Config
	// SourceAddr, if set, is the local address the agent connects from
	// (a machine with several; its token binds to the first it sees).
	SourceAddr string
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
	// MemoryLimitBytes is each task's RLIMIT_AS (0: none), on top of the
	// task's own resources.memory.
	MemoryLimitBytes int64
	// CPULimitSeconds is each task's RLIMIT_CPU (0: none).
	CPULimitSeconds int64
	// LocalAPIAddr is the address of the agent-local REST API; "" turns it
	// off (see DefaultLocalAPIAddr).
	LocalAPIAddr string
	// Retention bounds the local files and the journal (see Retention).
	Retention Retention
	// Sandbox runs tasks in a bubblewrap sandbox as an unprivileged user
	// (the isolation block of docs/executor.md).
	Sandbox isolation.Sandbox
	// NoCgroups limits tasks' resources with rlimits even where the agent
	// could make cgroups.
	NoCgroups bool
	// ClaimAhead is how many tasks the agent may claim beyond its free
	// slots while its recent processes were short (AheadBelow); they wait
	// for the next free slot. 0, the default, claims only for free slots:
	// a task claimed ahead is held from other agents while it waits, which
	// suits a machine that runs floods of short tasks, not one of several
	// agents sharing longer work.
	ClaimAhead int
	// ShimPath is the shim binary (taskmesh-shim) that serves tasks.
	// Default: taskmesh-shim beside the agent's executable when it is
	// there, else the agent's own executable re-executed as `executor
	// shim`, which works the same but costs more per task.
	ShimPath string
	// ShimPerTask starts a shim process for every task, as before there
	// was a shim host. Default: one shim host per agent process serves
	// every task, which spares each task a process start-up
	// (docs/decisions/0099-one-shim-host-per-agent.md).
	ShimPerTask bool
	// OrphanGrace is how long a shim keeps a task running without an agent
	// attached (default two thirds of AgentLostAfter: 10 s). It must end
	// before AgentLostAfter (a second before, or a third of it when that
	// is shorter). A task leased from the server is bounded more tightly
	// still by its fence (fence.go), which holds whatever the task does
	// with SIGTERM and whether the agent is dead, stopped or cut off.
	OrphanGrace time.Duration
	// AgentLostAfter is the dead-agent timeout of the server this agent
	// works for (the scheduler's --agent-lost-after; default 15 s): after
	// that much silence the server leases the agent's tasks elsewhere, so
	// the agent's own tasks must be dead by then (fence.go). It bounds
	// HeartbeatInterval: at most half the fence, 6 s by default.
	AgentLostAfter time.Duration
	Logger         *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// LogValue keeps the token out of logs when Settings are logged.
func (c Settings) LogValue() slog.Value {
	c.Token = "[redacted]"
	type plain Settings // drops the LogValue method: no recursion
	return slog.AnyValue(plain(c))
}

// Config is the agent's configuration: the operator's Settings plus knobs
// for tests. Zero values get the documented defaults from withDefaults.
type Config struct {
	Settings

	// ShimCommand starts the shim: the agent appends "serve -dir <run dir>";
	// the shim runs it with "exec ..." as the trampoline of a task under
	// limits. Default: the taskmesh-shim binary beside this executable
	// (ShimBinary), else this executable with "executor shim" (the taskmesh
	// binary's subcommand, which starts an order of magnitude slower; tests
	// re-execute the test binary the same way).
	ShimCommand []string
	// RunnerCommand starts the video runner: the agent appends "video -dir
	// <run dir>". Default: this executable with "executor shim".
	RunnerCommand []string
	// RPCTimeout bounds every server call but the long-poll claim
	// (default 10 s).
	RPCTimeout time.Duration
	// NoopConcurrency bounds noop tasks in flight (default 16 × Slots).
	NoopConcurrency int
	// SyncParallel bounds the outcomes the sync loop delivers at once
	// (default DefaultSyncParallel; deliver.go).
	SyncParallel int
	// AheadBelow: the agent claims tasks ahead of its free slots while
	// its recent processes ran shorter than this on average (default
	// DefaultAheadBelow; claim.go).
	AheadBelow time.Duration
	// VideoRealtime renders videos no faster than playback, so progress
	// moves visibly (demonstrations and tests).
	VideoRealtime bool

	// typesDefaulted: Types was empty and got the defaults, so video joins
	// them when its tools are present.
	typesDefaulted bool
	// fence and fenceGrace are the fence of a task leased from the server
	// and the SIGKILL grace after it (fence.go), from AgentLostAfter.
	fence, fenceGrace time.Duration
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
	// DefaultSyncParallel: a backlog of outcomes drains this many at a
	// time. One at a time, a busy server's answer time bounds the agent's
	// rate: the backlog outgrew the outcomes of 16 slots and never cleared.
	DefaultSyncParallel   = 16
	DefaultAgentLostAfter = 15 * time.Second
	// orphanMargin keeps the orphan grace this far below AgentLostAfter
	// (or a third of it, when that is less), after which the server
	// re-leases a silent agent's tasks: a task must be dead before its
	// next attempt can start elsewhere.
	orphanMargin = time.Second
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
		c.typesDefaulted = true
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
	if c.AgentLostAfter <= 0 {
		c.AgentLostAfter = DefaultAgentLostAfter
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = c.AgentLostAfter * 2 / 3
	}
	if most := c.AgentLostAfter - min(orphanMargin, c.AgentLostAfter/3); c.OrphanGrace > most {
		return c, fmt.Errorf("orphan grace must stay below the server's dead-agent timeout of %s (%s at most)", c.AgentLostAfter, most)
	}
	c.fence, c.fenceGrace = fence.Times(c.AgentLostAfter)
	if c.Server != "" && c.HeartbeatInterval > c.fence/2 {
		// A fenced task would be stopped whenever one heartbeat is late.
		return c, fmt.Errorf("heartbeat interval %s is too long for the server's dead-agent timeout of %s: at most %s", c.HeartbeatInterval, c.AgentLostAfter, c.fence/2)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if err := c.shimDefaults(); err != nil {
		return c, err
	}
	if c.AheadBelow <= 0 {
		c.AheadBelow = DefaultAheadBelow
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = 10 * time.Second
	}
	if c.NoopConcurrency <= 0 {
		c.NoopConcurrency = 16 * c.Slots
	}
	if c.SyncParallel <= 0 {
		c.SyncParallel = DefaultSyncParallel
	}
	if c.Version == "" {
		c.Version = buildVersion()
	}
	c.Retention.defaults()
	return c, nil
}

// shimDefaults fills in how the shim and the video runner start.
func (c *Config) shimDefaults() error {
	if len(c.ShimCommand) > 0 && len(c.RunnerCommand) > 0 {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	self := []string{exe, "executor", "shim"}
	if len(c.RunnerCommand) == 0 {
		c.RunnerCommand = self
	}
	if len(c.ShimCommand) > 0 {
		return nil
	}
	if c.ShimPath == "" {
		c.ShimPath = sibling.Of(exe, ShimBinary)
	} else if err := sibling.Runnable(c.ShimPath); err != nil {
		return fmt.Errorf("shim binary: %w", err)
	}
	c.ShimCommand = self
	if c.ShimPath != "" {
		c.ShimCommand = []string{c.ShimPath}
	}
	return nil
}

// ShimBinary is the name of the shim binary the agent looks for beside its
// own executable.
const ShimBinary = sibling.Shim

// buildVersion is the binary's module version and revision, as the Go
// toolchain recorded them.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	if v == "" {
		v = "devel"
	}
	return v
}
