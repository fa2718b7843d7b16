package shim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskmesh/taskmesh/platform/timerslack"
)

// StartError says the task could not be started (command not found, bad
// workdir, ...). The shim has written status.json with the same error.
type StartError struct{ Msg string }

func (e *StartError) Error() string { return "start: " + e.Msg }

// Launch describes how to start a shim.
type Launch struct {
	// Command is the shim command prefix, e.g. [exe, "executor", "shim"].
	Command []string
	// Env is the shim's own environment. It should be minimal: the task's
	// environment travels in the Spec.
	Env    []string
	RunDir string
	Spec   Spec
	// ReadyTimeout bounds the wait for the readiness line (default 30 s).
	ReadyTimeout time.Duration
}

// Started identifies a running shim and task.
type Started struct {
	ShimPID int
	PID     int
}

// Start writes the spec, starts the shim in its own session and waits for
// it to report the task's pid. The shim's exit is reaped by a goroutine of
// the caller; once the caller's process dies the shim is reparented and
// keeps running.
func Start(ctx context.Context, l Launch) (Started, error) {
	if len(l.Command) == 0 {
		return Started{}, errors.New("shim: no command")
	}
	if err := WriteSpec(l.RunDir, l.Spec); err != nil {
		return Started{}, fmt.Errorf("write shim spec: %w", err)
	}
	cmd, pr, err := startDetached(l.Command, []string{"serve", "-dir", l.RunDir}, l.Env, l.RunDir, filepath.Join(l.RunDir, LogFile))
	if err != nil {
		return Started{}, fmt.Errorf("start shim: %w", err)
	}
	defer pr.Close()

	timeout := l.ReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	r, err := readReady(ctx, pr, timeout)
	switch {
	case errors.Is(err, errExitedEarly):
		b, _ := os.ReadFile(filepath.Join(l.RunDir, LogFile))
		return Started{}, fmt.Errorf("shim exited before it was ready: %s", strings.TrimSpace(string(b)))
	case err != nil && ctx.Err() != nil:
		// The shim goes on; if it started the task it will notice that no
		// agent attaches and stop it after its orphan grace.
		return Started{}, err
	case err != nil:
		_ = cmd.Process.Kill()
		return Started{}, fmt.Errorf("shim %w", err)
	}
	if r.Error != "" {
		return Started{ShimPID: cmd.Process.Pid}, &StartError{Msg: r.Error}
	}
	return Started{ShimPID: cmd.Process.Pid, PID: r.PID}, nil
}

// startDetached starts command + args in dir, in a session of its own,
// its output appended to logPath and a readiness pipe as its file
// descriptor 3, whose read end it returns. The process's exit is reaped by
// a goroutine of the caller; once the caller's process dies it is
// reparented and keeps running.
func startDetached(command, args, env []string, dir, logPath string) (*exec.Cmd, *os.File, error) {
	if len(command) == 0 {
		return nil, nil, errors.New("no command")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(command[0], append(append([]string{}, command[1:]...), args...)...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{pw}
	// Setsid: a shim must not share the agent's session or process group,
	// so signals aimed at the agent (a terminal's ^C, a group kill) miss it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The shim and the tasks it starts run with the timer slack the agent
	// was started with, not the agent's own
	// (docs/decisions/0124-agents-run-with-the-timer-slack-and-their-tasks-without-it.md).
	err = timerslack.StartChild(cmd.Start)
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, nil, err
	}
	go func() { _ = cmd.Wait() }()
	return cmd, pr, nil
}

// ErrGone is returned by Attach when no shim listens on the socket (it
// finished and left, or died).
var ErrGone = errors.New("shim is gone")

// Session is the agent's attachment to one shim: a wait connection held
// open for the task's whole life (which tells the shim an agent is there)
// and a control connection for state and stop requests.
type Session struct {
	mu   sync.Mutex // serialises control requests
	ctl  net.Conn
	ctlR *bufio.Reader
	wait net.Conn

	done   chan struct{}
	result Status
	err    error
}

// Attach connects to the shim at socket.
func Attach(socket string) (*Session, error) {
	ctl, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	wait, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	s := &Session{ctl: ctl, ctlR: bufio.NewReader(ctl), wait: wait, done: make(chan struct{})}
	go s.awaitExit()
	return s, nil
}

func (s *Session) awaitExit() {
	defer close(s.done)
	b, _ := json.Marshal(Request{Op: OpWait})
	if _, err := s.wait.Write(append(b, '\n')); err != nil {
		s.err = fmt.Errorf("shim wait: %w", err)
		return
	}
	line, err := bufio.NewReader(s.wait).ReadBytes('\n')
	if err != nil {
		s.err = fmt.Errorf("shim connection lost: %w", err)
		return
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		s.err = fmt.Errorf("shim answer: %w", err)
		return
	}
	if resp.State.Exit == nil {
		s.err = errors.New("shim answered wait without an exit status")
		return
	}
	s.result = *resp.State.Exit
}

// Done is closed when the task ended or the connection broke; Result then
// tells which.
func (s *Session) Done() <-chan struct{} { return s.done }

// Result returns the task's status after Done is closed. An error means the
// shim went away without answering (Close was called, or it died): the
// caller should look for status.json.
func (s *Session) Result() (Status, error) {
	<-s.done
	return s.result, s.err
}

// State asks for the current state.
func (s *Session) State(ctx context.Context) (State, error) {
	return s.request(ctx, Request{Op: OpState})
}

// Stop asks the shim to stop the task: SIGTERM to its group, then SIGKILL
// after grace (0: at once).
func (s *Session) Stop(ctx context.Context, reason string, grace time.Duration) (State, error) {
	return s.request(ctx, Request{Op: OpStop, Reason: reason, Grace: &grace})
}

// Fence renews the task's fence: the shim stops the task unless it is
// renewed again within d (Spec.Fence).
func (s *Session) Fence(ctx context.Context, d time.Duration) (State, error) {
	return s.request(ctx, Request{Op: OpFence, Fence: &d})
}

func (s *Session) request(ctx context.Context, req Request) (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.ctl.SetDeadline(deadline)
	b, _ := json.Marshal(req)
	if _, err := s.ctl.Write(append(b, '\n')); err != nil {
		return State{}, fmt.Errorf("shim %s: %w", req.Op, err)
	}
	line, err := s.ctlR.ReadBytes('\n')
	if err != nil {
		return State{}, fmt.Errorf("shim %s: %w", req.Op, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return State{}, fmt.Errorf("shim %s: %w", req.Op, err)
	}
	if resp.Error != "" {
		return resp.State, fmt.Errorf("shim %s: %s", req.Op, resp.Error)
	}
	return resp.State, nil
}

// HungUp says a control request failed because the shim closed the
// connection: it has ended its task and left, or it died. Either way the
// session's Done follows and Result says which, so the failed request
// itself tells the caller nothing more. A shim's refusal, a timeout or a
// garbled answer is not a hang-up.
func HungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed)
}

// Close detaches from the shim. The task keeps running; if no agent
// attaches again within the orphan grace, the shim stops it.
func (s *Session) Close() {
	s.ctl.Close()
	s.wait.Close()
	<-s.done
}
