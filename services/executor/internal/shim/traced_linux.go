//go:build linux

package shim

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// The traced start (docs/decisions/0090-traced-start-instead-of-the-exec-trampoline.md):
// the task is forked and execs under PTRACE_TRACEME, so the kernel stops
// it right after its execve, before its first instruction. The shim then
// moves it into its cgroups and sets its rlimits from outside (cgroup.procs,
// prlimit) and lets it go. No task code runs before they hold, as with
// the `shim exec` trampoline, without the trampoline's own Go start-up.

// errTraceDenied: the kernel or a security policy refuses ptrace here
// (Yama's ptrace_scope 3, a seccomp filter); the trampoline does the job.
var errTraceDenied = errors.New("ptrace is not permitted")

// startTraced forks and execs path stopped at its first instruction, runs
// setup(pid) and releases it. The caller must not wait for children while
// it runs: the stop is collected here. A task whose setup fails is killed
// and reaped, and the error returned.
//
// The child also gets SIGKILL when the forking thread ends
// (PR_SET_PDEATHSIG): a shim killed between the fork and the release
// leaves no task running outside its cgroup. That thread is the shim's for
// its whole life (it is only locked here, never ended), so the rule reads:
// a task started this way does not outlive its shim.
func startTraced(path string, argv []string, attr *syscall.ProcAttr, setup func(pid int) error) (int, error) {
	// ptrace requests are the tracer thread's: the fork, the wait for the
	// stop and the detach must come from one OS thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sys := syscall.SysProcAttr{}
	if attr.Sys != nil {
		sys = *attr.Sys
	}
	sys.Ptrace, sys.Pdeathsig = true, syscall.SIGKILL
	traced := *attr
	traced.Sys = &sys
	pid, err := syscall.ForkExec(path, argv, &traced)
	if errors.Is(err, syscall.EPERM) {
		return 0, fmt.Errorf("%w: %v", errTraceDenied, err)
	}
	if err != nil {
		return 0, err
	}
	ws, err := waitPid(pid)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return 0, fmt.Errorf("wait for the task's first stop: %w", err)
	}
	if !ws.Stopped() {
		// Killed before its first instruction (by whom is not ours to
		// know): it never ran, and is reaped.
		return 0, fmt.Errorf("the task ended before its first instruction (%s)", describe(ws))
	}
	if err := setup(pid); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = syscall.PtraceDetach(pid)
		_, _ = waitPid(pid)
		return 0, err
	}
	if err := syscall.PtraceDetach(pid); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_, _ = waitPid(pid)
		return 0, fmt.Errorf("release the task: %w", err)
	}
	return pid, nil
}

// waitPid waits for the next state change of pid.
func waitPid(pid int) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		return ws, err
	}
}

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}

// setRlimits sets the task's limits from outside it (prlimit), as the
// trampoline sets them on itself: RLIMIT_AS, and RLIMIT_CPU with a hard
// limit one second above the soft one so that SIGXCPU comes first.
func setRlimits(pid int, asBytes, cpuSeconds int64) error {
	if asBytes > 0 {
		as := unix.Rlimit{Cur: uint64(asBytes), Max: uint64(asBytes)}
		if err := unix.Prlimit(pid, unix.RLIMIT_AS, &as, nil); err != nil {
			return fmt.Errorf("prlimit RLIMIT_AS: %w", err)
		}
	}
	if cpuSeconds > 0 {
		cpu := unix.Rlimit{Cur: uint64(cpuSeconds), Max: uint64(cpuSeconds) + 1}
		if err := unix.Prlimit(pid, unix.RLIMIT_CPU, &cpu, nil); err != nil {
			return fmt.Errorf("prlimit RLIMIT_CPU: %w", err)
		}
	}
	return nil
}

// ProbeTracedStart reports whether tasks can be started traced here: it
// starts path (any executable; it is killed at its first stop, before it
// runs) the way startTraced does. The agent asks once at start-up.
func ProbeTracedStart(path string) error {
	pid, err := startTraced(path, []string{path}, &syscall.ProcAttr{}, func(int) error { return errProbeDone })
	if errors.Is(err, errProbeDone) {
		return nil
	}
	if err == nil {
		// Not reached: setup always refuses. Do not leave it running.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_, _ = waitPid(pid)
	}
	return err
}

var errProbeDone = errors.New("probe done")
