package shim

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strconv"
	"time"
)

// accept serves agent connections. Every open connection counts as an
// attached agent and holds off the orphan timer.
func (s *server) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns++
		s.open[c] = struct{}{}
		if s.orphan != nil {
			s.orphan.Stop()
		}
		s.mu.Unlock()
		go s.handle(c)
	}
}

// handle answers one connection's requests in order; when the last
// connection closes while the task runs, the orphan countdown starts.
func (s *server) handle(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		s.conns--
		delete(s.open, c)
		if s.conns == 0 && s.exit == nil {
			s.armOrphanLocked()
		}
		s.mu.Unlock()
	}()
	r := bufio.NewReader(c)
	enc := json.NewEncoder(c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var req Request
		var resp Response
		if err := json.Unmarshal(line, &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			switch req.Op {
			case OpState:
			case OpStop:
				grace := s.spec.Grace
				if req.Grace != nil {
					grace = max(*req.Grace, 0)
				}
				reason := req.Reason
				if reason == "" {
					reason = "stopped"
				}
				s.stop(reason, grace)
			case OpFence:
				if req.Fence == nil {
					resp.Error = "fence: no length given"
				} else if err := s.renewFence(*req.Fence); err != nil {
					resp.Error = err.Error()
				}
			case OpWait:
				if !s.waitOrHangup(c) {
					return
				}
			default:
				resp.Error = "unknown op " + strconv.Quote(req.Op)
			}
		}
		resp.State = s.state()
		if err := enc.Encode(&resp); err != nil {
			return
		}
	}
}

// waitOrHangup blocks until the task ended; it returns false if the agent
// hung up first. While waiting it must notice the hangup, or a dead agent
// would keep counting as connected and the orphan timer would never run.
func (s *server) waitOrHangup(c net.Conn) bool {
	hup := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(hup)
		buf := make([]byte, 1)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := c.Read(buf); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				return
			}
		}
	}()
	select {
	case <-s.done:
		close(stopWatch)
		// Wake the watcher's pending Read now rather than at its deadline:
		// otherwise every outcome reaches the agent up to 200 ms late.
		_ = c.SetReadDeadline(time.Now())
		<-hup
		_ = c.SetReadDeadline(time.Time{})
		return true
	case <-hup:
		return false
	}
}

// state is a snapshot for the agent.
func (s *server) state() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{
		ShimPID:  os.Getpid(),
		PID:      s.pid,
		Running:  s.exit == nil,
		Stopping: s.stopping,
		Progress: s.progress,
		Exit:     s.exit,
	}
}
