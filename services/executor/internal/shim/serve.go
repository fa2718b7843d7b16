package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/cgroup"
)

// server serves one task.
type server struct {
	spec   Spec
	runDir string
	pid    int // task pid = its process group id
	reaper *reaper
	// report tells whoever started the task that it runs (or why it does
	// not), once: the readiness pipe of a shim of its own, the control
	// connection's answer in a host.
	report func(ready)
	// agentAttached: the process's (nil for a shim of one task).
	agentAttached func() bool

	stdout, stderr *capture

	mu        sync.Mutex // guards the fields below
	conns     int
	open      map[net.Conn]struct{} // the agent's connections
	orphan    *time.Timer
	fence     *time.Timer // nil: the task has no fence
	fenced    bool        // the fence passed; renewals come too late
	stopping  string
	ended     bool // the main process exited; no stop may be recorded now
	killTimer *time.Timer
	killAt    time.Time // when killTimer fires
	progress  Progress
	fileStamp string // size+mtime of the progress file last read
	exit      *Status
	done      chan struct{} // closed when exit is set
}

// serve runs a shim of its own for runDir (`shim serve`) and returns its
// exit code.
func serve(runDir string) int {
	p := newProcess()
	return p.serveTask(runDir, reportReady)
}

// process is what the tasks a shim process serves share: the reaper, and
// the SIGTERM/SIGINT that stops them all.
type process struct {
	reaper *reaper
	term   <-chan struct{} // closed at the first SIGTERM or SIGINT
	// agentAttached says whether an agent holds a connection to this
	// process (a host's control connection); nil for a shim of one task.
	agentAttached func() bool
}

// newProcess sets up the process for serving tasks.
func newProcess() *process {
	// The shim lives in its own session; a hangup from a terminal the agent
	// once had must not kill it, and a closed agent socket must not either.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	term := make(chan struct{})
	go func() { <-sig; close(term) }()
	if err := becomeSubreaper(); err != nil {
		logf("subreaper: %v", err)
	}
	return &process{reaper: newReaper(), term: term}
}

// serveTask serves the task of runDir to its end: report is called once,
// when the task runs or could not start; serveTask returns once the agent
// has read the outcome (or gave it time to), with the shim's exit code.
func (p *process) serveTask(runDir string, report func(ready)) int {
	// The lock comes first: a second shim for the same directory must
	// leave before it touches the socket or any file (see lock.go).
	lock, err := lockRunDir(runDir)
	if err != nil {
		logf("%s: %v", runDir, err)
		report(ready{Error: err.Error()})
		return 1
	}
	defer lock.Close()
	spec, err := readSpec(runDir)
	if err != nil {
		logf("%s: %v", runDir, err)
		report(ready{Error: err.Error()})
		return 1
	}

	s := &server{spec: spec, runDir: runDir, reaper: p.reaper, report: report, agentAttached: p.agentAttached,
		open: map[net.Conn]struct{}{}, done: make(chan struct{})}
	_ = os.Remove(spec.Socket)
	ln, err := net.Listen("unix", spec.Socket)
	if err != nil {
		err = fmt.Errorf("listen %s: %w", spec.Socket, err)
		s.failStart(err)
		return 1
	}
	_ = os.Chmod(spec.Socket, 0o600)
	defer os.Remove(spec.Socket)

	if err := markSpawned(runDir); err != nil {
		ln.Close()
		s.failStart(fmt.Errorf("mark spawned: %w", err))
		return 0
	}
	started := time.Now()
	exitCh, err := s.spawn()
	if err != nil {
		ln.Close()
		s.failStart(err)
		return 0
	}
	report(ready{PID: s.pid})

	s.mu.Lock()
	s.armOrphanLocked()
	if spec.Fence > 0 {
		s.fence = time.AfterFunc(spec.Fence, s.fenceExpired)
	}
	s.mu.Unlock()
	go s.accept(ln)
	var timeout <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()

	term := p.term
	var ws syscall.WaitStatus
	for waiting := true; waiting; {
		select {
		case ws = <-exitCh:
			waiting = false
		case <-timeout:
			s.stop(StopTimeout, spec.Grace)
		case <-term:
			s.stop(StopTerminated, spec.Grace)
			term = nil // closed for good: once is enough
		case <-poll.C:
			s.pollProgressFile()
		}
	}
	ended := time.Now()
	s.finish(ws, started, ended)

	// Linger until the agent has read the outcome (every connection
	// closed), but not forever: status.json holds it too.
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		n := s.conns
		s.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-deadline:
			ln.Close()
			s.hangUp()
			return 0
		case <-time.After(50 * time.Millisecond):
		}
	}
	ln.Close()
	return 0
}

// hangUp closes the connections still open after the linger: a shim of
// its own exits next, and a host must not keep them.
func (s *server) hangUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.open {
		c.Close()
	}
}

// reportReady writes the readiness line to fd 3 (see the package doc) and
// closes it.
func reportReady(r ready) {
	f := os.NewFile(3, "ready")
	if f == nil {
		return
	}
	b, _ := json.Marshal(r)
	_, _ = f.Write(append(b, '\n'))
	f.Close()
}

// failStart records a task that never ran. Its cgroup goes first, as at
// a task's end (finish): the agent made it for this shim to remove, and
// once status.json says how the attempt ended, nothing else will.
func (s *server) failStart(err error) {
	if g := s.spec.Cgroup; g != nil {
		if rerr := cgroup.Remove(g.Dirs); rerr != nil {
			logf("%v", rerr)
		}
	}
	now := time.Now()
	st := Status{
		TaskID: s.spec.TaskID, AttemptID: s.spec.AttemptID,
		ExitCode: -1, StartError: err.Error(), StartedAt: now, EndedAt: now,
	}
	if werr := writeStatus(s.runDir, st); werr != nil {
		logf("write status: %v", werr)
	}
	s.report(ready{Error: err.Error()})
}

// finish writes the outcome and wakes every waiter.
func (s *server) finish(ws syscall.WaitStatus, started, ended time.Time) {
	st := Status{
		TaskID: s.spec.TaskID, AttemptID: s.spec.AttemptID, PID: s.pid,
		StartedAt: started, EndedAt: ended,
	}
	switch {
	case ws.Exited():
		st.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		sig := ws.Signal()
		st.Signal, st.SignalName = int(sig), SignalName(sig)
		st.ExitCode = 128 + int(sig)
	}
	var outTail, errTail []byte
	st.StdoutBytes, st.StdoutDropped, outTail = s.stdout.result()
	st.StderrBytes, st.StderrDropped, errTail = s.stderr.result()
	// A stream's tail file only when the output limit cut the stream: its
	// own file then lacks the end. Otherwise the file holds all of it and
	// its end is the tail, and two files fewer per task spare the disk's
	// inode allocation, which a short task pays for every file it makes
	// (docs/executor.md, "The spawn path").
	if st.StdoutDropped > 0 {
		_ = os.WriteFile(filepath.Join(s.runDir, StdoutTail), outTail, 0o600)
	}
	if st.StderrDropped > 0 {
		_ = os.WriteFile(filepath.Join(s.runDir, StderrTail), errTail, 0o600)
	}
	s.pollProgressFile()

	s.mu.Lock()
	st.Stop = s.stopping
	st.Progress, st.ProgressMessage = s.progress.Value, s.progress.Message
	if s.killTimer != nil {
		s.killTimer.Stop()
	}
	if s.orphan != nil {
		s.orphan.Stop()
	}
	if s.fence != nil {
		s.fence.Stop()
	}
	s.mu.Unlock()

	if g := s.spec.Cgroup; g != nil {
		// The task's processes are gone (its group was emptied); what the
		// OOM killer did is in the cgroup until it is removed.
		oom, err := g.OOMKilled()
		if err != nil {
			logf("%v", err)
		}
		st.OOMKilled = oom
		if err := s.releaseGroup(g); err != nil {
			logf("%v", err)
		}
	}
	if err := writeStatus(s.runDir, st); err != nil {
		logf("write status: %v", err)
	}
	s.mu.Lock()
	s.exit = &st
	close(s.done)
	s.mu.Unlock()
}

// releaseGroup kills what is left of the task in its cgroup and removes
// the group, or leaves it empty when the agent reuses it. A group is left
// only while an agent is attached to the host: one that has stopped may
// never come back to take it, and a group removed here is one it does not
// find when it does (docs/executor.md, "Cgroups are reused").
func (s *server) releaseGroup(g *cgroup.Group) error {
	if s.spec.KeepCgroup && s.agentAttached != nil && s.agentAttached() {
		return cgroup.Empty(g.Dirs)
	}
	return cgroup.Remove(g.Dirs)
}

// SignalName names a signal the way a task's or a service's error does
// ("killed by SIGKILL"): by its constant name, or "signal N" for one
// without a name here. Go's own String gives the description ("killed").
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	}
	return "signal " + strconv.Itoa(int(sig))
}

// stop sends SIGTERM to the group now and SIGKILL after grace. Only the
// first stop counts: its reason is the one recorded.
func (s *server) stop(reason string, grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping != "" || s.ended {
		return
	}
	s.stopping = reason
	pgid := s.pid
	task := fmt.Sprintf("task %s attempt %s", s.spec.TaskID, s.spec.AttemptID)
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		logf("%s: stop (%s): SIGTERM to group %d: %v", task, reason, pgid, err)
	}
	s.killAt = time.Now().Add(grace)
	s.killTimer = time.AfterFunc(grace, func() {
		// Logged: a task that outlives its stop is what the fence exists to
		// prevent, and the time of the SIGKILL is what tells why one did.
		err := syscall.Kill(-pgid, syscall.SIGKILL)
		logf("%s: stop (%s): SIGKILL to group %d after %s: %v", task, reason, pgid, grace, errOrOK(err))
	})
}

// logf writes one line to the shim's log (stderr: shim-host.log for a
// host, shim.log in the run directory for a shim of its own), with the
// time: a fence's and a stop's moments are what an overlap is read from.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format(time.RFC3339Nano)+" shim: "+format+"\n", args...)
}

// errOrOK is err's text, or "ok".
func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// renewFence moves the fence to d from now.
func (s *server) renewFence(d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.fence == nil:
		return errors.New("fence: the task has none")
	case s.fenced:
		return errors.New("fence: it passed; the task is being stopped")
	case s.exit != nil:
		return nil // ended: nothing left to fence
	}
	s.fence.Reset(max(d, 0))
	return nil
}

// fenceExpired stops the task: the agent did not renew its fence in time,
// and the server may lease it elsewhere once FenceGrace and the agent's
// margin have passed too. A stop already under way (an orphan's, a
// cancel's with a long grace) keeps its recorded reason but gets its
// SIGKILL no later than FenceGrace from now: the bound holds whatever the
// task does with SIGTERM.
func (s *server) fenceExpired() {
	s.mu.Lock()
	if s.fenced || s.exit != nil {
		s.mu.Unlock()
		return
	}
	s.fenced = true
	s.mu.Unlock()
	grace := s.spec.FenceGrace
	// The agent may be stopped or cut off and unable to say why its task
	// ended; the shim's log does.
	logf("task %s attempt %s: fence passed without renewal: SIGTERM now, SIGKILL in %s",
		s.spec.TaskID, s.spec.AttemptID, grace)
	s.stop(StopFenced, grace)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.killTimer == nil {
		return
	}
	if by := time.Now().Add(grace); by.Before(s.killAt) {
		s.killTimer.Reset(grace)
		s.killAt = by
	}
}

// armOrphanLocked starts the orphan countdown; s.mu is held.
func (s *server) armOrphanLocked() {
	if s.orphan != nil {
		s.orphan.Stop()
	}
	if s.spec.OrphanGrace <= 0 {
		return // never orphaned
	}
	s.orphan = time.AfterFunc(s.spec.OrphanGrace, func() {
		s.mu.Lock()
		alone := s.conns == 0
		s.mu.Unlock()
		if alone {
			s.stop(StopOrphaned, s.spec.Grace)
		}
	})
}
