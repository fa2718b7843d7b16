package shim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spawn starts the task and the goroutines around it. The returned channel
// yields the main process's wait status.
func (s *server) spawn() (<-chan syscall.WaitStatus, error) {
	spec := s.spec
	if err := os.MkdirAll(spec.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("workdir: %w", err)
	}
	path, err := lookPath(spec.Argv[0], spec.Env, spec.Dir)
	if err != nil {
		return nil, err
	}
	argv := append([]string{spec.Argv[0]}, spec.Argv[1:]...)
	// A task with limits, a cgroup or another user must have them all
	// before its first instruction. The traced start (traced_linux.go)
	// sets cgroup and limits from outside while it is stopped there; the
	// wrapper (`shim exec`) joins the cgroup, drops to the credential and
	// sets the rlimits on itself, then execs the task.
	limited := spec.MemoryLimitBytes > 0 || spec.CPULimitSeconds > 0 || spec.Cgroup != nil || spec.Credential != nil
	traced := limited && spec.TracedStart && spec.Credential == nil
	var wrapperArgv []string
	if limited && len(spec.SelfArgv) > 0 {
		wrapperArgv = append([]string{}, spec.SelfArgv...)
		wrapperArgv = append(wrapperArgv, "exec",
			"-as", strconv.FormatInt(spec.MemoryLimitBytes, 10),
			"-cpu", strconv.FormatInt(spec.CPULimitSeconds, 10))
		if spec.Cgroup != nil {
			wrapperArgv = append(wrapperArgv, "-cgroup", strings.Join(spec.Cgroup.Dirs, ","))
		}
		if c := spec.Credential; c != nil {
			wrapperArgv = append(wrapperArgv, "-uid", strconv.FormatUint(uint64(c.UID), 10), "-gid", strconv.FormatUint(uint64(c.GID), 10))
		}
		wrapperArgv = append(append(wrapperArgv, "--", path), argv...)
	}
	if limited && !traced && wrapperArgv == nil {
		return nil, errors.New("resource limits need the shim command")
	}

	outF, err := os.OpenFile(filepath.Join(s.runDir, StdoutFile), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	errF, err := os.OpenFile(filepath.Join(s.runDir, StderrFile), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	s.stdout = &capture{f: outF, limit: spec.OutputLimit, tailSize: spec.TailBytes, onLine: s.stdoutLine}
	s.stderr = &capture{f: errF, limit: spec.OutputLimit, tailSize: spec.TailBytes}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()

	attr := &syscall.ProcAttr{
		Dir:   spec.Dir,
		Env:   spec.Env,
		Files: []uintptr{devnull.Fd(), outW.Fd(), errW.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	start := taskStart{path: path, argv: argv, traced: traced, setUp: s.setUp}
	if wrapperArgv != nil {
		start.wrapperPath, start.wrapperArgv = spec.SelfArgv[0], wrapperArgv
	}
	// The process's reaper collects the exit (reaper.go): it is the only
	// caller of wait4 but for a traced start's own wait for its stop.
	pid, exitCh, err := s.reaper.fork(func() (int, error) { return start.fork(attr, startTraced) })
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("exec %s: %w", spec.Argv[0], err)
	}
	s.pid = pid

	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); pump(outR, s.stdout) }()
	go func() { defer pumps.Done(); pump(errR, s.stderr) }()

	// Hand the status on only once the output is drained (or given up on:
	// a process that left the group may hold the pipe open forever).
	result := make(chan syscall.WaitStatus, 1)
	go func() {
		ws := <-exitCh
		s.mu.Lock()
		s.ended = true
		s.mu.Unlock()
		// Whatever is left of the group dies with the task.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		waitGroupGone(pid, 5*time.Second)
		drained := make(chan struct{})
		go func() { pumps.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(2 * time.Second):
			outR.Close()
			errR.Close()
			<-drained
		}
		outF.Close()
		errF.Close()
		result <- ws
	}()
	return result, nil
}

// taskStart is how spawn forks the task.
type taskStart struct {
	path string
	argv []string
	// wrapperPath and wrapperArgv run the task through `shim exec`; empty
	// when the task needs no wrapper or none is configured.
	wrapperPath string
	wrapperArgv []string
	// traced: start it traced (traced_linux.go), with setUp run while it
	// is stopped at its first instruction.
	traced bool
	setUp  func(pid int) error
}

// fork starts the task: traced when asked, through the wrapper when
// ptrace is refused here (or when not traced and there is a wrapper),
// else plainly. tracedStart is startTraced, given so that a refusal can
// be tested.
func (t taskStart) fork(attr *syscall.ProcAttr,
	tracedStart func(string, []string, *syscall.ProcAttr, func(int) error) (int, error)) (int, error) {
	if t.traced {
		pid, err := tracedStart(t.path, t.argv, attr, t.setUp)
		if !errors.Is(err, errTraceDenied) || t.wrapperArgv == nil {
			return pid, err
		}
		// Refused here: the wrapper does the set-up instead.
	}
	if t.wrapperArgv != nil {
		return syscall.ForkExec(t.wrapperPath, t.wrapperArgv, attr)
	}
	return syscall.ForkExec(t.path, t.argv, attr)
}

// setUp puts the task, stopped at its first instruction, in its cgroup
// and under its rlimits (the traced start).
func (s *server) setUp(pid int) error {
	if g := s.spec.Cgroup; g != nil {
		if err := g.Move(pid); err != nil {
			return err
		}
	}
	return setRlimits(pid, s.spec.MemoryLimitBytes, s.spec.CPULimitSeconds)
}

// waitGroupGone polls until no process is left in the group.
func waitGroupGone(pgid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// lookPath resolves a command name with the task's PATH, not the shim's.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("exec %q: %w", name, err)
		}
		return p, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec %q: executable file not found in $PATH", name)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if fi.Mode()&0o111 == 0 {
		return os.ErrPermission
	}
	return nil
}
