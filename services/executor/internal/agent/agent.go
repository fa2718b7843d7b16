// Package agent is the executor agent: it pulls tasks from the Taskmesh
// LeaseService, runs them through shims, keeps leases alive, reports
// progress and outcomes, and keeps every promise in a local journal so that
// it survives restarts and server outages (docs/executor.md).
//
// The agent's loops, each a goroutine of Run:
//
//  1. claim: when process slots are free, ClaimTasks with limit = free slots
//     and a long-poll wait. The request_id is reused when the call is
//     retried after a transport error, so a lost response returns the same
//     tasks. Claimed tasks are journaled (assigned) before anything starts.
//  2. local: runs pending tasks created through the agent-local API.
//  3. heartbeat: SendHeartbeat with the running attempts and free slots;
//     stops the attempts the server lists (cancelled, preempted,
//     lease_lost). A heartbeat that succeeds after failures wakes the sync
//     loop.
//  4. sync: delivers finished outcomes that could not be delivered when
//     they happened, in order of end time, with exponential backoff.
//  5. retention: hourly, prunes delivered journal rows and removes old
//     run and work directories (retention.go).
//  6. services: keeps the managed services the server declares for this
//     agent running (services.go, package services).
//
// Each attempt runs in its own goroutine: policy check, journal "running",
// StartTask (execution.go), run directory and shim start (spawn.go), then
// supervision: lease renewal, progress, stop requests and the shim's exit
// (supervise.go). The outcome is journaled (synced=0) before CompleteTask
// is sent (outcome.go, deliver.go).
//
// On start, recover.go reloads the journal: attempts that were running are
// checked with the server (RenewTaskLease) and reattached to their shims or
// stopped; pending local tasks are queued again; unsynced outcomes are
// delivered.
//
// Stopping Run detaches from the shims without stopping the tasks: a new
// agent on the same data directory reattaches within the orphan grace.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/video"
	"github.com/taskmesh/taskmesh/services/executor/internal/fsalloc"
	"github.com/taskmesh/taskmesh/services/executor/internal/isolation"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/localapi"
	"github.com/taskmesh/taskmesh/services/executor/internal/policy"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
	"google.golang.org/grpc"
)

// Agent runs tasks for one machine.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	journal *journal.Journal
	policy  policy.Policy
	conn    *grpc.ClientConn
	lease   taskv1.LeaseServiceClient        // nil without a server: local tasks only
	files   taskv1.AttemptFilesServiceClient // checkpoints and artifacts; nil without a server
	video   video.Tools                      // the video runner's tools (type video)
	http    *http.Client                     // result uploads
	baseEnv []string                         // PATH, HOME, LANG of the agent; nothing else

	slots   chan struct{} // process slots: a send takes one
	noops   chan struct{} // bound on noop tasks in flight
	running atomic.Int32  // processes running now
	// Claiming ahead (claim.go): tasks claimed and waiting for a slot, the
	// average run time of recent processes, and a wake-up for the claim
	// loop when either changes.
	queued    atomic.Int32
	runTime   atomic.Int64
	aheadWake chan struct{}
	metrics   agentMetrics

	mu            sync.Mutex
	runs          map[string]*attempt // active attempts by attempt id
	inflight      map[string]bool     // attempts being delivered now
	reachable     bool
	lastHeartbeat time.Time
	// contact is when the last call the server answered (a heartbeat or a
	// claim) was sent, by the monotonic clock: the fences count from it
	// (fence.go).
	contact time.Time
	// lapses (under mu) counts the answers that came after the fence of
	// the contact before them had passed, the first one of this process
	// included: the server may have leased elsewhere the attempts this
	// agent held before each. stopsLapse (under mu) is the lapse count at
	// the send of the latest heartbeat whose stops have been delivered.
	// An attempt registered before the latest lapse starts only once
	// stopsLapse has caught up (fence.go, awaitFence).
	lapses, stopsLapse int
	// ownerFences (under mu) are the deadlines of the local tasks that run
	// under their creator's fence, by task id, on the monotonic clock
	// (owner_fence.go); unknown after a restart until the next renewal.
	ownerFences map[string]time.Time
	// keeps (under mu) holds what attempts claimed by this process keep
	// (journal.AttemptFiles) until their outcome is settled, so that the
	// reads at start and delivery need no journal query; after a restart
	// they come from the journal (attempt_files.go).
	keeps map[string]journal.AttemptFiles

	backlog      atomic.Bool // some outcome waits for the sync loop
	localWaiting atomic.Int32
	// claimCancel ends the claim long-polling now (nil when none does),
	// and claimInterrupted says a local task ended it for a slot the
	// claim holds (interruptClaim).
	claimCancel      context.CancelFunc
	claimInterrupted bool
	syncWake         chan struct{}
	localWake        chan struct{}
	// localAccept is held by Submit from a local task's insert to its
	// read-back, and by the local loop while it picks its next task: the
	// answer to a create is the task as accepted, never one the loop has
	// already started.
	localAccept   sync.Mutex
	heartbeatWake chan struct{}
	drained       atomic.Bool // the last heartbeat said an operator drained us

	// isolation limits each task's resources (cgroups, else rlimits) and
	// sandboxes it when configured.
	isolation *isolation.Limiter
	// spareRuns holds emptied run directories for the next attempts
	// (nil when tasks are sandboxed).
	spareRuns *spareRunDirs
	// tracedStart: the shims put tasks in their cgroups and under their
	// limits while the tasks are stopped at their first instruction,
	// without the exec trampoline (shim.ProbeTracedStart, at New).
	tracedStart bool
	// shims starts the shim that serves a run directory: the agent's
	// shim host, or a shim of the task's own (Config.ShimPerTask).
	shims shimStarter

	wg       sync.WaitGroup // every goroutine Run started
	listener net.Listener
}

// New opens the journal, dials the server and binds the local API, so that
// configuration errors surface before Run.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "runs"), 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	tools, err := findVideoTools(&cfg)
	if err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
	// Idle cgroups of settled attempts are kept for later ones, as many as
	// the spare run directories (docs/executor.md, "Cgroups are reused").
	limiter, err := isolation.New(isolation.Config{Name: "taskmesh-" + safeName(cfg.AgentID), NoCgroups: cfg.NoCgroups,
		SpareGroups: 2 * cfg.Slots,
		Sandbox:     cfg.Sandbox, Hidden: hiddenFromTasks(cfg), Logger: cfg.Logger.With("agent_id", cfg.AgentID)})
	if err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
	if err := os.MkdirAll(cfg.WorkRoot, 0o755); err != nil {
		return nil, fmt.Errorf("work root: %w", err)
	}
	// Attempts create directories in these two (each task its work
	// directory, an attempt its run directory when no spare is left) and
	// retention removes them; spread over ext4's block groups, the inodes
	// of their files are found quickly (internal/fsalloc). Elsewhere the
	// hint is refused, and nothing else depends on it.
	for _, d := range []string{filepath.Join(cfg.DataDir, "runs"), cfg.WorkRoot} {
		if err := fsalloc.SpreadSubdirs(d); err != nil {
			cfg.Logger.Debug("directories not spread over block groups", "dir", d, "err", err)
		}
	}
	for _, d := range []string{cfg.DataDir, filepath.Join(cfg.DataDir, "runs"), cfg.WorkRoot} {
		if err := limiter.Traversable(d); err != nil {
			return nil, fmt.Errorf("executor config: %w", err)
		}
	}
	j, err := journal.Open(ctx, filepath.Join(cfg.DataDir, "journal.db"))
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:     cfg,
		log:     cfg.Logger.With("agent_id", cfg.AgentID),
		now:     cfg.Now,
		journal: j,
		video:   tools,
		policy: policy.Policy{
			Types: cfg.Types, AllowedCommands: cfg.AllowedCommands, BlockedPatterns: cfg.BlockedPatterns,
		},
		http:          &http.Client{Timeout: 10 * time.Minute},
		baseEnv:       baseEnv(),
		slots:         make(chan struct{}, cfg.Slots),
		metrics:       newAgentMetrics(),
		noops:         make(chan struct{}, cfg.NoopConcurrency),
		runs:          map[string]*attempt{},
		inflight:      map[string]bool{},
		keeps:         map[string]journal.AttemptFiles{},
		syncWake:      make(chan struct{}, 1),
		aheadWake:     make(chan struct{}, 1),
		localWake:     make(chan struct{}, 1),
		heartbeatWake: make(chan struct{}, 1),
		isolation:     limiter,
	}
	// A sandboxed task's run directory is laid out differently (its own
	// task/ directory, owned by the sandbox user), so only the agents
	// whose tasks run as themselves reuse run directories.
	if !limiter.Sandboxed() {
		spares, err := newSpareRunDirs(filepath.Join(cfg.DataDir, "spare-runs"), 2*cfg.Slots)
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("data dir: %w", err)
		}
		a.spareRuns = spares
	}
	a.shims = perTaskShims{command: cfg.ShimCommand, env: a.baseEnv}
	if !cfg.ShimPerTask {
		dir := filepath.Join(cfg.DataDir, "shims")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			j.Close()
			return nil, fmt.Errorf("shim host directory: %w", err)
		}
		host := shim.NewHost(cfg.ShimCommand, a.baseEnv, dir)
		host.Launched = func(pid int, socket string) {
			a.metrics.shimHostStarted(context.Background())
			a.log.Info("shim host started", "pid", pid, "socket", socket)
		}
		a.shims = host
	}
	if err := shim.ProbeTracedStart(cfg.ShimCommand[0]); err != nil {
		a.log.Info("tasks with limits start through the shim's exec trampoline", "reason", err)
	} else {
		a.tracedStart = true
	}
	if cfg.Server != "" {
		conn, err := dial(cfg)
		if err != nil {
			j.Close()
			return nil, err
		}
		a.conn, a.lease, a.files = conn, taskv1.NewLeaseServiceClient(conn), taskv1.NewAttemptFilesServiceClient(conn)
	}
	if cfg.LocalAPIAddr != "" {
		ln, err := net.Listen("tcp", cfg.LocalAPIAddr)
		if err != nil {
			a.close()
			return nil, fmt.Errorf("local api listen %s: %w", cfg.LocalAPIAddr, err)
		}
		a.listener = ln
	}
	return a, nil
}

// LocalAPIAddr returns the address the local API listens on ("" if off).
func (a *Agent) LocalAPIAddr() string {
	if a.listener == nil {
		return ""
	}
	return a.listener.Addr().String()
}

func (a *Agent) close() {
	// The host goes on serving the tasks it has until each is read (by the
	// agent that comes next) or orphaned.
	if h, ok := a.shims.(*shim.Host); ok {
		h.Close()
	}
	a.isolation.Close()
	if a.listener != nil {
		a.listener.Close()
	}
	if a.conn != nil {
		a.conn.Close()
	}
	a.journal.Close()
}

// localAPIOptions refuses the sandbox's user on the local API: sandboxed
// tasks share the machine's loopback, and the API would show them every
// task's spec and output and let them cancel any (docs/api/agent-local.md,
// "Who may call it"). Tasks that are not sandboxed run as the agent's own
// user, who may read its journal anyway.
func (a *Agent) localAPIOptions() localapi.Options {
	if uid, _, ok := a.isolation.Credential(); ok {
		return localapi.Options{RefusedUIDs: []uint32{uid}}
	}
	return localapi.Options{}
}

// Run runs the agent until ctx ends. Tasks keep running in their shims
// after it returns.
func (a *Agent) Run(ctx context.Context) error {
	defer a.close()
	defer a.observe()()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var srv *http.Server
	if a.listener != nil {
		srv = &http.Server{
			Handler:           localapi.Handler(ctx, localapi.NewServer(a.journal, a), a.localAPIOptions()),
			ReadHeaderTimeout: 10 * time.Second,
		}
		a.runInBackground(func() {
			if err := srv.Serve(a.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("local api stopped", "err", err)
			}
		})
	}

	if err := a.recover(ctx); err != nil {
		cancel()
		a.wg.Wait()
		return err
	}
	a.runInBackground(func() { a.localLoop(ctx) })
	a.runInBackground(func() { a.retentionLoop(ctx) })
	if a.lease != nil {
		a.runInBackground(func() { a.claimLoop(ctx) })
		a.runInBackground(func() { a.heartbeatLoop(ctx) })
		a.runInBackground(func() { a.syncLoop(ctx) })
		a.runInBackground(func() { a.servicesLoop(ctx) })
	}
	a.log.Info("executor agent started", "server", a.cfg.Server, "slots", a.cfg.Slots,
		"local_api", a.LocalAPIAddr(), "data_dir", a.cfg.DataDir, "shim", a.cfg.ShimCommand[0],
		"traced_start", a.tracedStart)

	<-ctx.Done()
	if srv != nil {
		shut, done := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(shut)
		done()
	}
	a.wg.Wait()
	a.log.Info("executor agent stopped")
	return nil
}

// go_ starts a goroutine that Run waits for.
func (a *Agent) runInBackground(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// hiddenFromTasks are what a sandboxed task must never see: the agent's
// data directory (journal, run directories, other tasks' output) and its
// token file.
func hiddenFromTasks(cfg Config) []string {
	out := []string{cfg.DataDir}
	if cfg.TokenFile != "" {
		if abs, err := filepath.Abs(cfg.TokenFile); err == nil {
			out = append(out, abs)
		}
	}
	return out
}

// baseEnv is the minimal environment every task starts from. The agent's
// own environment is never passed on: it may hold the agent token.
func baseEnv() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = "/"
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	return []string{"PATH=" + path, "HOME=" + home, "LANG=" + lang}
}
