package shim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// A shim host is one shim process serving the tasks of many run
// directories (docs/decisions/0099-one-shim-host-per-agent.md). Each task
// is served exactly as a shim of its own serves it (serveTask): the run
// directory's lock, spawn marker, socket, status file and orphan grace are
// the same, so the agent attaches, stops and recovers a task without
// knowing which kind of shim serves it. What the tasks share is the
// process: its start-up, paid once instead of once per task, its reaper
// and its fate. A host that dies takes its traced tasks with it, as a
// shim of its own takes its one task.
//
// The host listens on a control socket. Each request is one JSON line,
// {"op":"serve","run_dir":DIR}, answered with one line once the task runs
// or definitely does not: {"pid":N} or {"error":"..."}, the readiness line
// of a shim of its own. A host lives while any control connection is open
// or any task is served; the agent keeps one connection open for its own
// life, so a host outlives a dead agent only until its last task has been
// read. An agent that starts again starts a host of its own, at a new
// socket, and attaches to the old host's tasks through their sockets.

// OpServe asks a host to serve the task of Request.RunDir.
const OpServe = "serve"

// hostStopping is the answer of a host that is about to exit: nothing was
// started, and the agent starts another host.
const hostStopping = "the shim host is stopping"

// hostStartGrace is how long a new host waits for its first connection
// before it leaves on its own (the agent connects right after ready).
const hostStartGrace = 30 * time.Second

// host is the serving side.
type host struct {
	*process
	mu    sync.Mutex // guards tasks, conns and quitting
	tasks int        // tasks being served, from request to lingering done
	conns int        // open control connections
	// quit is closed once the host has nothing left to serve; a request
	// that comes after is refused (hostStopping), so none is lost.
	quit     chan struct{}
	quitting bool
}

// hostMain is `shim host -socket PATH`: it serves until idle and returns
// the exit code.
func hostMain(socket string) int {
	p := newProcess()
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		logf("host: %v", err)
		reportReady(ready{Error: err.Error()})
		return 1
	}
	// The socket starts tasks as the agent's user: the agent's alone.
	_ = os.Chmod(socket, 0o600)
	h := &host{process: p, quit: make(chan struct{})}
	p.agentAttached = h.attached
	reportReady(ready{PID: os.Getpid()})
	go h.accept(ln)
	go func() { <-h.term; h.checkIdle() }()
	time.AfterFunc(hostStartGrace, h.checkIdle)
	<-h.quit
	ln.Close()
	_ = os.Remove(socket)
	return 0
}

// attached says whether an agent holds a control connection.
func (h *host) attached() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns > 0
}

// checkIdle ends the host when no task is served and no agent holds a
// connection (or a SIGTERM stopped the tasks, which then ended).
func (h *host) checkIdle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	terminated := false
	select {
	case <-h.term:
		terminated = true
	default:
	}
	if h.quitting || h.tasks > 0 || (h.conns > 0 && !terminated) {
		return
	}
	h.quitting = true
	close(h.quit)
}

func (h *host) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.conns++
		h.mu.Unlock()
		go h.control(c)
	}
}

// control answers one connection's requests in order.
func (h *host) control(c net.Conn) {
	defer func() {
		c.Close()
		h.mu.Lock()
		h.conns--
		h.mu.Unlock()
		h.checkIdle()
	}()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var req Request
		var resp ready
		switch err := json.Unmarshal(line, &req); {
		case err != nil:
			resp.Error = "bad request: " + err.Error()
		case req.Op != OpServe:
			resp.Error = fmt.Sprintf("unknown op %q", req.Op)
		case !filepath.IsAbs(req.RunDir):
			resp.Error = fmt.Sprintf("run directory %q is not an absolute path", req.RunDir)
		default:
			resp = h.serve(filepath.Clean(req.RunDir))
		}
		b, _ := json.Marshal(resp)
		if _, err := c.Write(append(b, '\n')); err != nil {
			return
		}
	}
}

// serve starts serving runDir's task and returns its readiness.
func (h *host) serve(runDir string) ready {
	h.mu.Lock()
	if h.quitting {
		h.mu.Unlock()
		return ready{Error: hostStopping}
	}
	select {
	case <-h.term:
		h.mu.Unlock()
		return ready{Error: hostStopping}
	default:
	}
	h.tasks++
	h.mu.Unlock()
	reported := make(chan ready, 1)
	go func() {
		defer func() {
			h.mu.Lock()
			h.tasks--
			h.mu.Unlock()
			h.checkIdle()
		}()
		h.serveTask(runDir, func(r ready) { reported <- r })
	}()
	return <-reported
}
