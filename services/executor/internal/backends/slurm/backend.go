package slurm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/holder"
	"github.com/taskmesh/taskmesh/services/executor/internal/fence"
)

// Config configures a backend. Zero durations and sizes take the
// defaults noted.
type Config struct {
	// AgentID is the backend's identity on the lease API (its agent token
	// is bound to it) and marks its Slurm jobs; MachineID defaults to it.
	AgentID, MachineID string
	Labels             []string
	// Slots bounds the jobs one backend holds at once, pending or running
	// (default 64): Slurm queues them, this only bounds what is leased.
	Slots int
	// Types the backend claims (default shell, python, script, noop).
	Types []string
	// ClaimWait is the long-poll wait of a claim (default 30 s, ≤ 60 s).
	ClaimWait time.Duration
	// PollInterval is how often slurmctld's job list is read, and a
	// placement's task on its node (default 1 s).
	PollInterval time.Duration
	// PendingPollInterval is the poll while a job waits to start and the
	// backend's jobs are moving (default 100 ms; see watcher): how soon a
	// start is seen is most of the latency Taskmesh adds to Slurm's.
	PendingPollInterval time.Duration
	// RenewInterval of the leases (default 30 s; sooner when a third of the
	// lease is left).
	RenewInterval time.Duration
	// HeartbeatInterval of SendHeartbeat, which carries cancel and preempt
	// (default 5 s).
	HeartbeatInterval time.Duration
	// RPCTimeout bounds every lease call but the long-poll claim (10 s).
	RPCTimeout time.Duration
	// AgentLostAfter is the scheduler's --agent-lost-after (default 15 s).
	// The backend cancels its jobs before the server may lease their
	// tasks again: a fence of 12 s by default (holder.Config.Fence).
	AgentLostAfter time.Duration
	// Job configures the jobs (mode, partition, priorities, directories).
	Job JobConfig
	// StateDir keeps a record of each attempt held (see attemptStore);
	// empty keeps none.
	StateDir string
	// NodeAgents maps a Slurm node to the address of its Taskmesh agent's
	// local API (placement); NodeAgentURL is the address of the others,
	// with {node} for the node's name (e.g. "http://{node}:7071").
	NodeAgents   map[string]string
	NodeAgentURL string
	// StartSignalListen, when set (placement), is the address the backend
	// takes placeholders' start signals on (signal.go), so that a start
	// is known when the placeholder runs rather than at the next listing
	// of slurmctld's jobs; the listing, every PollInterval, stays the
	// fallback. StartSignalAddr is the host:port the nodes reach it at
	// (default: the listener's address).
	StartSignalListen, StartSignalAddr string
	// OutputLimit is the bytes kept of each batch output stream (16 MiB).
	OutputLimit int64
	// HTTP is the client of node agents and result uploads.
	HTTP   *http.Client
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.AgentID == "" {
		return c, errors.New("agent id is required")
	}
	if c.MachineID == "" {
		c.MachineID = c.AgentID
	}
	if c.Slots <= 0 {
		c.Slots = 64
	}
	if len(c.Types) == 0 {
		c.Types = Types()
	}
	for _, t := range c.Types {
		if _, err := batchScript(&taskv1.Task{Type: t, Command: "true"}, ""); err != nil {
			return c, fmt.Errorf("type %q: %w", t, err)
		}
	}
	if c.ClaimWait <= 0 {
		c.ClaimWait = 30 * time.Second
	}
	c.ClaimWait = min(c.ClaimWait, 60*time.Second)
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.PendingPollInterval <= 0 {
		c.PendingPollInterval = 100 * time.Millisecond
	}
	if c.RenewInterval <= 0 {
		c.RenewInterval = 30 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = 10 * time.Second
	}
	if c.AgentLostAfter <= 0 {
		c.AgentLostAfter = 15 * time.Second
	}
	if err := c.holder().CheckFence(); err != nil {
		return c, err
	}
	if c.OutputLimit <= 0 {
		c.OutputLimit = 16 << 20
	}
	if c.HTTP == nil {
		// Every attempt on a node asks that node's agent for its task
		// once a PollInterval, and a scheduling pass hands many tasks to
		// one agent at once: keep a connection per attempt that may ask
		// at the same time, not net/http's default of two per host, so
		// that the calls do not dial (and leave TIME_WAIT behind) each
		// time.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = max(c.Slots, 2)
		c.HTTP = &http.Client{Timeout: 10 * time.Minute, Transport: tr}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Job.AgentID = c.AgentID
	switch c.Job.Mode {
	case ModePlacement:
		if c.Job.JobDir == "" {
			c.Job.JobDir = "/tmp"
		}
		if len(c.NodeAgents) == 0 && c.NodeAgentURL == "" {
			return c, errors.New("placement needs the node agents' addresses (NodeAgents or NodeAgentURL)")
		}
	case ModeBatch:
		if c.StartSignalListen != "" {
			return c, errors.New("the start signal is for placement: a batch job is the task's own script")
		}
		if c.Job.JobDir == "" {
			return c, errors.New("batch mode needs a job directory shared with the nodes")
		}
	default:
		return c, fmt.Errorf("mode %q: want placement or batch", c.Job.Mode)
	}
	switch c.Job.Priority {
	case "", PriorityNice, PriorityAbsolute, PriorityOff:
	default:
		return c, fmt.Errorf("priority mapping %q: want nice, absolute or off", c.Job.Priority)
	}
	return c, nil
}

// holder is the lease side's configuration.
func (c Config) holder() holder.Config {
	f, _ := fence.Times(c.AgentLostAfter)
	return holder.Config{
		AgentID: c.AgentID, MachineID: c.MachineID, Labels: c.Labels, Slots: c.Slots, Types: c.Types,
		MaxClaim: 1000, ClaimWait: c.ClaimWait, RPCTimeout: c.RPCTimeout, RenewInterval: c.RenewInterval,
		HeartbeatInterval: c.HeartbeatInterval, Fence: f,
	}
}

// slurmAPI is what the backend asks of slurmrestd (*Client).
type slurmAPI interface {
	jobLister
	Submit(ctx context.Context, spec JobSpec) (int64, error)
	Job(ctx context.Context, id int64) (Job, error)
	Cancel(ctx context.Context, id int64) error
	EndAtTimeLimit(ctx context.Context, id int64) error
}

// Backend claims tasks and runs them through Slurm.
type Backend struct {
	cfg    Config
	log    *slog.Logger
	lease  *holder.Holder[*run] // the attempts held, by attempt id
	slurm  slurmAPI
	watch  *watcher
	store  attemptStore
	agents agentResolver
	// signal takes placeholders' start signals; nil when off.
	signal *startSignal

	mu sync.Mutex
	// checked: when each node agent (by address) last proved its machine.
	checked map[string]time.Time
}

// New returns a backend that leases through lease and runs jobs through
// slurm.
func New(cfg Config, lease taskv1.LeaseServiceClient, slurm slurmAPI) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("slurm backend: %w", err)
	}
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("slurm backend: state dir: %w", err)
		}
	}
	log := cfg.Logger.With("backend", "slurm", "agent_id", cfg.AgentID, "mode", string(cfg.Job.Mode))
	var signal *startSignal
	if cfg.StartSignalListen != "" {
		if signal, err = newStartSignal(cfg.StartSignalListen, cfg.StartSignalAddr, cfg.StateDir, log); err != nil {
			return nil, fmt.Errorf("slurm backend: %w", err)
		}
	}
	b := &Backend{
		cfg: cfg, log: log, slurm: slurm,
		lease:   holder.New(cfg.holder(), lease, log, func(r *run) chan<- string { return r.stop }),
		watch:   newWatcher(slurm, cfg.PollInterval, cfg.PendingPollInterval, log),
		store:   attemptStore{dir: cfg.StateDir},
		agents:  agentResolver{byNode: cfg.NodeAgents, template: cfg.NodeAgentURL, http: cfg.HTTP},
		signal:  signal,
		checked: map[string]time.Time{},
	}
	if signal != nil {
		signal.nudge = b.nudge
	}
	return b, nil
}

// StartSignalAddr is the address the start signal listens on; empty
// when it is off.
func (b *Backend) StartSignalAddr() string {
	if b.signal == nil {
		return ""
	}
	return b.signal.Addr()
}

// nudge passes a placeholder's start signal to its attempt's follower.
func (b *Backend) nudge(attemptID string, s startReport) bool {
	r, ok := b.lease.Get(attemptID)
	if !ok {
		return false
	}
	select {
	case r.signal <- s:
	default: // one is waiting already
	}
	return true
}

// Run claims and follows jobs until ctx ends. The jobs stay in Slurm when
// it returns; a backend with the same agent id follows them again.
func (b *Backend) Run(ctx context.Context) error {
	if b.cfg.Job.Mode == ModeBatch {
		// Slurm opens the output files before the script runs, and the
		// script makes its work directory, as the job's user: both
		// directories must exist and let every user create entries (sticky,
		// like /tmp, so that no job removes another's).
		for _, sub := range []string{"out", "work"} {
			dir := filepath.Join(b.cfg.Job.JobDir, sub)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("slurm backend: %w", err)
			}
			if err := os.Chmod(dir, 0o1777); err != nil {
				b.log.Warn("cannot open a job directory to the jobs' user", "dir", dir, "err", err)
			}
		}
	}
	if b.signal != nil {
		// Closed last: until then the backend's placeholders may signal.
		defer b.signal.close()
		go b.signal.serve()
	}
	b.lease.Go(func() { b.watch.run(ctx) })
	if err := b.adopt(ctx); err != nil {
		b.lease.Wait()
		return err
	}
	b.lease.Go(func() { b.lease.ClaimLoop(ctx, func(t *taskv1.Task) { b.accept(ctx, t) }) })
	b.lease.Go(func() { b.lease.HeartbeatLoop(ctx) })
	b.log.Info("slurm backend started", "partition", b.cfg.Job.Partition, "slots", b.cfg.Slots)
	<-ctx.Done()
	b.lease.Wait()
	return nil
}

// adopt resumes the attempts an earlier run of this backend left in
// Slurm: every job whose comment names this agent. Until slurmctld
// answers nothing is claimed, so no attempt's job can be submitted twice.
func (b *Backend) adopt(ctx context.Context) error {
	var jobs []Job
	for delay := time.Second; ; delay = min(delay*2, 30*time.Second) {
		var err error
		if jobs, err = b.watch.jobsSince(ctx, time.Now()); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		b.log.Warn("slurmctld unreachable; waiting to read the jobs of an earlier run", "err", err)
		if !holder.Sleep(ctx, delay) {
			return nil
		}
	}
	seen := map[string]bool{}
	for _, j := range jobs {
		ref, ok := parseComment(j.Comment)
		if !ok || ref.AgentID != b.cfg.AgentID {
			continue
		}
		seen[ref.AttemptID] = true
		task, _, hasRecord := b.store.load(ref.AttemptID)
		if j.Final() && !hasRecord && b.store.dir != "" {
			continue // its outcome was delivered before the restart
		}
		r := newRun(ref.TaskID, ref.AttemptID, task)
		r.jobID, r.adopted, r.mode = j.ID, true, ref.Mode
		if !b.lease.Hold(r.AttemptID, r) {
			continue
		}
		b.log.Info("following a job of an earlier run", "task_id", r.TaskID, "attempt_id", r.AttemptID, "job_id", j.ID, "state", j.State)
		b.lease.Go(func() { b.follow(ctx, r) })
	}
	// Records without a job: the backend stopped between writing the
	// record and submitting, or the job ended and left slurmctld's memory
	// while the backend was away. Either way there is no job to follow and
	// no outcome to read: the attempt fails, and the scheduler retries it.
	for _, attemptID := range b.store.attempts() {
		if seen[attemptID] {
			continue
		}
		task, jobID, ok := b.store.load(attemptID)
		if !ok {
			b.store.remove(attemptID)
			continue
		}
		r := newRun(task.GetId(), attemptID, task)
		if !b.lease.Hold(r.AttemptID, r) {
			continue
		}
		msg := "slurm backend: restarted before the attempt's job was submitted"
		if jobID != 0 {
			msg = fmt.Sprintf("slurm: job %d ended while the backend was away and slurmctld no longer knows its outcome", jobID)
		}
		b.lease.Go(func() {
			defer b.lease.Release(r.AttemptID)
			if b.complete(ctx, r, outcome{exitCode: -1, err: msg}, "", "", nil) {
				b.store.remove(attemptID)
			}
		})
	}
	return nil
}

// accept holds a claimed task and submits its job.
func (b *Backend) accept(ctx context.Context, t *taskv1.Task) {
	r := newRun(t.GetId(), t.GetAttemptId(), t)
	r.mode = b.cfg.Job.Mode
	if t.GetLeaseExpiresAt() != nil {
		r.leaseExpires = t.GetLeaseExpiresAt().AsTime()
	}
	if !b.lease.Hold(r.AttemptID, r) {
		return
	}
	b.lease.Go(func() { b.begin(ctx, r) })
}
