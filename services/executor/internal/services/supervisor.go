// Package services is the agent's supervisor of managed services
// (docs/api/services.md): long-running processes (sidecars such as
// heartbeat or monitoring daemons) the server declares and the agent keeps
// alive. They never go through the task queue.
//
// Reconcile takes the desired services (from the agent's synchronisation
// with the server) and converges each to it:
//
//   - desired running and not running: start it;
//   - desired stopped, or no longer desired (deleted, retargeted): stop it
//     (SIGTERM to its process group, SIGKILL after its grace period);
//   - a new version: stop the old process and start the new one (a roll,
//     not a restart: restarts does not count it);
//   - a process that ended on its own is restarted per its restart policy
//     (always; on-failure: a non-zero exit or a signal; never), after a
//     back-off that doubles from 1 s to 30 s and starts over once the
//     process stayed up 30 s; each restart counts in restarts.
//
// Each service runs in its own process group; its stdout and stderr go to
// <dir>/<service id>/{stdout,stderr}.log, rotated at LogMaxBytes. The
// processes get SIGKILL when the agent process dies (parent-death signal),
// so a lost agent leaves no unsupervised services behind.
package services

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/taskmesh/taskmesh/platform/timerslack"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// States a service reports (the server's current_state values).
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StateBackoff  = "backoff"
	StateStopped  = "stopped"
	StateExited   = "exited"
)

// Desired is one service as the server declares it.
type Desired struct {
	ID, Version, Command string
	Args                 []string
	Env                  map[string]string
	RestartPolicy        string // always, on-failure, never
	Running              bool   // desired_state running
	Grace                time.Duration
}

// Status is what the supervisor reports of one service.
type Status struct {
	ID, Version, State string
	PID, Restarts      int
	Error              string
}

// Config configures a Supervisor.
type Config struct {
	// Dir holds one directory of logs per service.
	Dir string
	// BaseEnv is the environment every service starts from (no secrets of
	// the agent).
	BaseEnv []string
	// LogMaxBytes rotates a log file at this size (default 10 MiB), keeping
	// LogKeep old files (default 3).
	LogMaxBytes int64
	LogKeep     int
	// Backoff bounds (defaults 1 s and 30 s).
	BackoffMin, BackoffMax time.Duration
	Logger                 *slog.Logger
}

// Supervisor runs the managed services of one agent. Its methods are safe
// for concurrent use.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	svcs map[string]*service
	wg   sync.WaitGroup
}

// New returns a supervisor; Close stops every service.
func New(cfg Config) *Supervisor {
	if cfg.LogMaxBytes <= 0 {
		cfg.LogMaxBytes = 10 << 20
	}
	if cfg.LogKeep <= 0 {
		cfg.LogKeep = 3
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Supervisor{cfg: cfg, log: cfg.Logger, svcs: map[string]*service{}}
}

// service is one supervised service: a goroutine (run) owns its process;
// others talk to it through want and read its status under mu.
type service struct {
	id   string
	want chan Desired // the latest desired state (buffer 1, replaced)
	stop chan struct{}
	done chan struct{}

	// forgotten: the service is no longer the agent's (not just stopping
	// with it); its saved restart count goes when it has stopped.
	forgotten atomic.Bool

	mu     sync.Mutex
	status Status
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// Reconcile converges the services to desired: services absent from it
// are stopped and forgotten, their restart counts with them.
func (s *Supervisor) Reconcile(desired []Desired) { s.reconcile(desired, true) }

// reconcile is Reconcile; forget says whether services absent from
// desired are no longer the agent's (their saved restart counts go) or
// only stop with the agent (Close: they are counted on after its
// restart).
func (s *Supervisor) reconcile(desired []Desired, forget bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := map[string]bool{}
	for _, d := range desired {
		keep[d.ID] = true
		svc, ok := s.svcs[d.ID]
		if !ok {
			// A service the agent ran before its restart goes on with its
			// count: the agent's own restart is not the service's.
			svc = &service{id: d.ID, want: make(chan Desired, 1), stop: make(chan struct{}), done: make(chan struct{}),
				status: Status{ID: d.ID, Version: d.Version, State: StateStopped, Restarts: s.savedRestarts(d.ID)}}
			s.svcs[d.ID] = svc
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.run(svc)
			}()
		}
		// Only the latest desired state matters: replace a pending one.
		select {
		case <-svc.want:
		default:
		}
		svc.want <- d
	}
	for id, svc := range s.svcs {
		if !keep[id] {
			svc.forgotten.Store(forget)
			close(svc.stop)
			delete(s.svcs, id)
		}
	}
}

// restartsFile keeps a service's restart count across agent restarts, in
// the service's directory.
const restartsFile = "restarts"

// serviceDir holds a service's logs and restart count.
func (s *Supervisor) serviceDir(id string) string {
	return filepath.Join(s.cfg.Dir, unsafeChars.ReplaceAllString(id, "_"))
}

// savedRestarts is the restart count an earlier run of the agent kept for
// the service; 0 when none (or unreadable).
func (s *Supervisor) savedRestarts(id string) int {
	b, err := os.ReadFile(filepath.Join(s.serviceDir(id), restartsFile))
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// saveRestarts keeps the service's restart count (written whole, then
// renamed over the old one).
func (s *Supervisor) saveRestarts(id string, n int) {
	dir := s.serviceDir(id)
	tmp := filepath.Join(dir, restartsFile+".tmp")
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = os.WriteFile(tmp, []byte(strconv.Itoa(n)+"\n"), 0o600)
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, restartsFile))
	}
	if err != nil {
		s.log.Warn("cannot keep the service's restart count", "service_id", id, "err", err)
	}
}

// Statuses reports every service the supervisor runs, by id.
func (s *Supervisor) Statuses() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.svcs))
	for _, id := range slices.Sorted(maps.Keys(s.svcs)) {
		svc := s.svcs[id]
		svc.mu.Lock()
		out = append(out, svc.status)
		svc.mu.Unlock()
	}
	return out
}

// Close stops every service and waits for them. Their restart counts
// stay for the agent's next run.
func (s *Supervisor) Close() {
	s.reconcile(nil, false)
	s.wg.Wait()
}

func (svc *service) set(f func(*Status)) {
	svc.mu.Lock()
	f(&svc.status)
	svc.mu.Unlock()
}

// proc is a running process of a service.
type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error // Wait's, once exited is closed
	logs    []*rotatingLog
	started time.Time
	version string
}

// run is the service's goroutine: it owns the process and applies each
// desired state as it comes.
func (s *Supervisor) run(svc *service) {
	log := s.log.With("service_id", svc.id)
	var (
		cur     Desired
		p       *proc
		retry   <-chan time.Time
		backoff = s.cfg.BackoffMin
	)
	defer func() {
		if p != nil {
			s.terminate(p, cur.Grace)
		}
		svc.set(func(st *Status) { st.State, st.PID = StateStopped, 0 })
		if svc.forgotten.Load() {
			_ = os.Remove(filepath.Join(s.serviceDir(svc.id), restartsFile))
		}
		close(svc.done)
	}()
	start := func() {
		np, err := s.start(svc.id, cur)
		if err != nil {
			log.Warn("service did not start", "err", err)
			svc.set(func(st *Status) { st.State, st.PID, st.Error = StateBackoff, 0, err.Error() })
			retry = time.After(backoff)
			backoff = min(backoff*2, s.cfg.BackoffMax)
			return
		}
		p = np
		svc.set(func(st *Status) { st.State, st.PID, st.Version = StateRunning, p.cmd.Process.Pid, cur.Version })
		log.Info("service started", "pid", p.cmd.Process.Pid, "version", cur.Version)
	}
	var exited <-chan struct{}
	for {
		exited = nil
		if p != nil {
			exited = p.exited
		}
		select {
		case <-svc.stop:
			return
		case d := <-svc.want:
			rolled := p != nil && d.Version != p.version
			prev := cur
			cur = d
			switch {
			case !d.Running:
				retry = nil
				if p != nil {
					s.terminate(p, prev.Grace)
					p = nil
				}
				svc.set(func(st *Status) { st.State, st.PID, st.Version = StateStopped, 0, d.Version })
			case rolled:
				// A new version replaces the process: not a restart.
				log.Info("service rolls to a new version", "from", p.version, "to", d.Version)
				s.terminate(p, prev.Grace)
				p, retry, backoff = nil, nil, s.cfg.BackoffMin
				start()
			case p == nil && retry == nil:
				start()
			}
		case <-exited:
			why := exitReason(p.err)
			up := time.Since(p.started)
			p = nil
			log.Warn("service exited", "reason", why, "up", up)
			if !restarts(cur.RestartPolicy, why) {
				svc.set(func(st *Status) { st.State, st.PID, st.Error = StateExited, 0, why })
				continue
			}
			if up > s.cfg.BackoffMax {
				backoff = s.cfg.BackoffMin
			}
			svc.set(func(st *Status) { st.State, st.PID, st.Error = StateBackoff, 0, why })
			retry = time.After(backoff)
			backoff = min(backoff*2, s.cfg.BackoffMax)
		case <-retry:
			retry = nil
			if cur.Running && p == nil {
				var n int
				svc.set(func(st *Status) { st.Restarts++; n = st.Restarts })
				s.saveRestarts(svc.id, n)
				start()
			}
		}
	}
}

// restarts applies a restart policy to how the process ended.
func restarts(policy, why string) bool {
	switch policy {
	case "never":
		return false
	case "on-failure":
		return why != "exit code 0"
	}
	return true
}

func exitReason(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + shim.SignalName(ws.Signal())
		}
		return fmt.Sprintf("exit code %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exit code 0"
}

// start launches d's process in a process group of its own, its output
// into the service's rotating logs.
func (s *Supervisor) start(id string, d Desired) (*proc, error) {
	dir := s.serviceDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	stdout, err := openLog(filepath.Join(dir, "stdout.log"), s.cfg.LogMaxBytes, s.cfg.LogKeep)
	if err != nil {
		return nil, err
	}
	stderr, err := openLog(filepath.Join(dir, "stderr.log"), s.cfg.LogMaxBytes, s.cfg.LogKeep)
	if err != nil {
		stdout.Close()
		return nil, err
	}
	cmd := exec.Command(d.Command, d.Args...)
	cmd.Dir = dir
	env := append([]string{}, s.cfg.BaseEnv...)
	for _, k := range slices.Sorted(maps.Keys(d.Env)) {
		env = append(env, k+"="+d.Env[k])
	}
	cmd.Env = append(env, "TASKMESH_SERVICE_ID="+id, "TASKMESH_SERVICE_VERSION="+d.Version)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A service is a user's program: it runs with the timer slack the
	// agent was started with, not the agent's own
	// (docs/decisions/0124-agents-run-with-the-timer-slack-and-their-tasks-without-it.md).
	if err := timerslack.StartChild(cmd.Start); err != nil {
		stdout.Close()
		stderr.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), logs: []*rotatingLog{stdout, stderr}, started: time.Now(), version: d.Version}
	go func() {
		p.err = cmd.Wait()
		for _, l := range p.logs {
			l.Close()
		}
		close(p.exited)
	}()
	return p, nil
}

// terminate stops p: SIGTERM to its process group, SIGKILL after grace.
func (s *Supervisor) terminate(p *proc, grace time.Duration) {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.exited
	}
	// Whatever the leader left in its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
