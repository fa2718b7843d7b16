package shim

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Host is the agent's side of its shim host: it starts the host when the
// first task needs it, and another when the host is gone. It is safe for
// concurrent use.
type Host struct {
	command []string
	env     []string
	dir     string
	// Launched, if set, is told of every host started (pid and control
	// socket): the first, and each that replaces one that died.
	Launched func(pid int, socket string)

	mu     sync.Mutex // serialises starting a host
	socket string     // the current host's control socket ("": none)
	pid    int
	hold   net.Conn // the connection that keeps the host alive
}

// NewHost returns the client of a shim host started as command + "host
// -socket ..." with env, its socket and log in dir.
func NewHost(command, env []string, dir string) *Host {
	return &Host{command: command, env: env, dir: dir}
}

// HostLogFile is the hosts' shared log in the host directory. Every host
// of a data directory appends to it; a host about to start moves a file
// past HostLogMaxBytes to HostLogFile+".1" (replacing the one before), so
// the two stay near that size however long the agent runs.
const HostLogFile = "shim-host.log"

// HostLogMaxBytes is the size past which the hosts' log is rotated.
const HostLogMaxBytes = 8 << 20

// errHostGone: the request never reached a host that could serve it.
var errHostGone = errors.New("shim host gone")

// Start writes the spec into runDir and has the host serve it; it returns
// as Start does (a StartError when the task could not be started).
func (h *Host) Start(ctx context.Context, runDir string, spec Spec) (Started, error) {
	if err := WriteSpec(runDir, spec); err != nil {
		return Started{}, fmt.Errorf("write shim spec: %w", err)
	}
	for try := 0; ; try++ {
		socket, pid, err := h.current(ctx)
		if err != nil {
			return Started{}, err
		}
		r, err := serveRequest(ctx, socket, runDir)
		if err != nil && try == 0 && ctx.Err() == nil && nothingServed(err, runDir) {
			// The host died or is leaving, and nothing was started: another
			// host serves the task.
			h.forget(socket)
			continue
		}
		if err != nil {
			return Started{}, err
		}
		if r.Error != "" {
			return Started{ShimPID: pid}, &StartError{Msg: r.Error}
		}
		return Started{ShimPID: pid, PID: r.PID}, nil
	}
}

// nothingServed reports whether a request that failed with err certainly
// started nothing in runDir: it never reached a host (errHostGone), or
// the host broke the connection before it took the run directory (its
// lock is free, and neither the spawn marker nor a status file is there).
// A request that timed out may still be served, by a host that is slow.
func nothingServed(err error, runDir string) bool {
	if errors.Is(err, errHostGone) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	st, ierr := Inspect(runDir)
	return ierr == nil && !st.ShimAlive && !st.MayHaveRun
}

// serveRequest asks the host at socket to serve runDir. errHostGone means
// the host certainly did not take the request.
func serveRequest(ctx context.Context, socket, runDir string) (ready, error) {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return ready{}, fmt.Errorf("%w: %v", errHostGone, err)
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	b, _ := json.Marshal(Request{Op: OpServe, RunDir: runDir})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return ready{}, fmt.Errorf("%w: %v", errHostGone, err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			// The host goes on; a task it started and no agent attaches to
			// is stopped after its orphan grace.
			return ready{}, ctx.Err()
		}
		return ready{}, fmt.Errorf("shim host did not answer: %w", err)
	}
	var r ready
	if err := json.Unmarshal(line, &r); err != nil {
		return ready{}, fmt.Errorf("shim host answer: %w", err)
	}
	if r.Error == hostStopping {
		return ready{}, errHostGone
	}
	return r, nil
}

// current returns the running host's socket and pid, starting a host if
// there is none.
func (h *Host) current(ctx context.Context) (string, int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return "", 0, err
	}
	if h.socket != "" {
		return h.socket, h.pid, nil
	}
	socket, err := hostSocketPath(h.dir)
	if err != nil {
		return "", 0, err
	}
	pid, err := h.launch(ctx, socket)
	if err != nil {
		return "", 0, err
	}
	hold, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return "", 0, fmt.Errorf("shim host: %w", err)
	}
	h.socket, h.pid, h.hold = socket, pid, hold
	go h.watch(socket, hold)
	if h.Launched != nil {
		h.Launched(pid, socket)
	}
	return socket, pid, nil
}

// watch forgets the host when its connection breaks: it died, and the
// next task starts another.
func (h *Host) watch(socket string, hold net.Conn) {
	_, _ = hold.Read(make([]byte, 1))
	h.forget(socket)
}

// forget drops the host at socket if it is still the current one.
func (h *Host) forget(socket string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.socket != socket {
		return
	}
	h.hold.Close()
	h.socket, h.pid, h.hold = "", 0, nil
}

// Close lets the host go: it exits once its tasks have ended and been
// read. The tasks go on meanwhile.
func (h *Host) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hold != nil {
		h.hold.Close()
	}
	h.socket, h.pid, h.hold = "", 0, nil
}

// launch starts a host in a session of its own and waits for its
// readiness line.
func (h *Host) launch(ctx context.Context, socket string) (int, error) {
	logPath := filepath.Join(h.dir, HostLogFile)
	rotateLog(logPath, HostLogMaxBytes)
	cmd, pr, err := startDetached(h.command, []string{"host", "-socket", socket}, h.env, h.dir, logPath)
	if err != nil {
		return 0, fmt.Errorf("start shim host: %w", err)
	}
	defer pr.Close()
	r, err := readReady(ctx, pr, 30*time.Second)
	if err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("shim host: %w", err)
	}
	if r.Error != "" {
		return 0, fmt.Errorf("shim host: %s", r.Error)
	}
	return cmd.Process.Pid, nil
}

// errExitedEarly: the readiness pipe closed without a readiness line.
var errExitedEarly = errors.New("exited before it was ready")

// readReady reads a readiness line from r within timeout (the error then
// reads "did not become ready within ...") or until ctx ends.
func readReady(ctx context.Context, r *os.File, timeout time.Duration) (ready, error) {
	lineCh := make(chan []byte, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadBytes('\n')
		lineCh <- line
	}()
	var line []byte
	select {
	case line = <-lineCh:
	case <-time.After(timeout):
		return ready{}, fmt.Errorf("did not become ready within %s", timeout)
	case <-ctx.Done():
		return ready{}, ctx.Err()
	}
	var rd ready
	if len(line) == 0 || json.Unmarshal(line, &rd) != nil {
		return ready{}, errExitedEarly
	}
	return rd, nil
}

// hostSocketPath names a new host's control socket: random, so that a
// host of an earlier agent, still serving its last tasks, keeps its own.
// A long directory puts it in the temporary directory, as SocketPath does.
func hostSocketPath(dir string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	name := "host-" + hex.EncodeToString(b[:]) + ".sock"
	p := filepath.Join(dir, name)
	if len(p) < 100 {
		return p, nil
	}
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(os.TempDir(), "taskmesh-"+hex.EncodeToString(sum[:4])+"-"+strings.TrimSuffix(name, ".sock")+".sock"), nil
}

// rotateLog moves path to path+".1" when it is larger than maxBytes. A host
// still writing to the old file keeps its descriptor and goes on writing
// there. A failure leaves the file where it is: a log is not worth failing
// a start for.
func rotateLog(path string, maxBytes int64) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > maxBytes {
		_ = os.Rename(path, path+".1")
	}
}
