package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is one OS process of the deployment: started, killed, stopped,
// continued and restarted by the fault driver with the same arguments, so
// a restarted service listens where its clients expect it.
type proc struct {
	name string // e.g. "scheduler-2"
	kind string // e.g. "scheduler"
	path string
	args []string
	env  []string
	log  string // file both output streams are appended to
	// ready reports whether the process serves; start waits for it.
	ready func(ctx context.Context) error
	// exits records the process ending when nobody asked it to; nil
	// records nothing.
	exits *exitLog

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// ending is set before the driver kills or stops the running command:
	// its exit was asked for. start clears it.
	ending bool
}

// exitLog records the processes that ended on their own during a run. A
// fault is healed once its process serves again, but a process may serve
// and then exit seconds later (the broker did, when its start-up repair
// outlasted a request timeout). Nothing restarts it: the rest of the run
// goes on without it, and this record names the cause first.
type exitLog struct {
	out io.Writer // each exit is also printed as it happens

	mu    sync.Mutex
	exits []procExit
}

// procExit is one process ending on its own.
type procExit struct {
	name   string
	at     time.Time
	status string // e.g. "exit status 1", "signal: segmentation fault"
	log    string
}

func (l *exitLog) record(e procExit) {
	l.mu.Lock()
	l.exits = append(l.exits, e)
	l.mu.Unlock()
	if l.out != nil {
		fmt.Fprintf(l.out, "chaos: %s exited on its own at %s: %s (log: %s)\n", e.name, e.at.UTC().Format("15:04:05.000"), e.status, e.log)
	}
}

func (l *exitLog) snapshot() []procExit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]procExit(nil), l.exits...)
}

// start starts the process and waits until it is ready.
func (p *proc) start(ctx context.Context) error {
	p.mu.Lock()
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	fmt.Fprintf(out, "\n=== %s start %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.name)
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = out, out
	// A process group of its own, so the driver's terminal signals do not
	// reach it, and the parent-death signal so a killed driver leaves no
	// deployment behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		p.mu.Unlock()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		out.Close()
		p.exited(cmd, err)
		close(done)
	}()
	p.cmd, p.done, p.ending = cmd, done, false
	p.mu.Unlock()
	if p.ready == nil {
		return nil
	}
	return waitReady(ctx, p, done)
}

// exited records cmd's end unless the driver asked for it.
func (p *proc) exited(cmd *exec.Cmd, err error) {
	p.mu.Lock()
	asked := p.ending || p.cmd != cmd
	p.mu.Unlock()
	if asked || p.exits == nil {
		return
	}
	status := "exited"
	if cmd.ProcessState != nil {
		status = cmd.ProcessState.String()
	} else if err != nil {
		status = err.Error()
	}
	p.exits.record(procExit{name: p.name, at: time.Now(), status: status, log: p.log})
}

func waitReady(ctx context.Context, p *proc, done chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		if err := p.ready(ctx); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting (log: %s)", p.name, p.log)
		case <-ctx.Done():
			return fmt.Errorf("%s did not become ready: %w (log: %s)", p.name, ctx.Err(), p.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// signal sends sig to the process itself (not its group: an agent's task
// shims must outlive it, as they outlive a crash of the agent).
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return errors.New(p.name + " is not running")
	}
	return p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits until it has exited.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.ending = true
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once continued on some kernels
	_ = cmd.Process.Kill()
	<-done
}

// stopGroup ends the process and everything it started, at the end of a
// run.
func (p *proc) stopGroup() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.ending = true
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// tcpReady is a readiness check: addr accepts connections.
func tcpReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// logPath is the log file of the process name under dir.
func logPath(dir, name string) string { return filepath.Join(dir, "logs", name+".log") }
