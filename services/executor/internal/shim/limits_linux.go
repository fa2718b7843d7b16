//go:build linux

package shim

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// execLimited sets the resource limits on this process and replaces it with
// path. Everything execve needs is built before the limits are set: under
// RLIMIT_AS the Go runtime of this wrapper may not be able to map more
// memory, so nothing may allocate between setrlimit and execve.
func execLimited(asBytes, cpuSeconds int64, path string, argv, env []string) error {
	argv0, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	as := unix.Rlimit{Cur: uint64(asBytes), Max: uint64(asBytes)}
	cpu := unix.Rlimit{Cur: uint64(cpuSeconds), Max: uint64(cpuSeconds) + 1}
	if asBytes > 0 {
		if _, _, e := unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_AS, uintptr(unsafe.Pointer(&as)), 0, 0, 0); e != 0 {
			return fmt.Errorf("setrlimit RLIMIT_AS: %w", e)
		}
	}
	if cpuSeconds > 0 {
		if _, _, e := unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CPU, uintptr(unsafe.Pointer(&cpu)), 0, 0, 0); e != 0 {
			return fmt.Errorf("setrlimit RLIMIT_CPU: %w", e)
		}
	}
	_, _, e := unix.RawSyscall(unix.SYS_EXECVE,
		uintptr(unsafe.Pointer(argv0)),
		uintptr(unsafe.Pointer(&argvp[0])),
		uintptr(unsafe.Pointer(&envp[0])))
	return fmt.Errorf("execve %s: %w", path, e)
}

// dropTo makes the process run as uid and gid with no supplementary
// groups, for every thread (Go applies these to all of them).
func dropTo(uid, gid int) error {
	if gid < 0 {
		gid = uid
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	return nil
}
