//go:build darwin

package shim

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// becomeSubreaper is Linux-only; on macOS (development machines) orphans
// go to launchd. The executor targets Linux; macOS only needs to build.
func becomeSubreaper() error { return errors.New("not supported on this system") }

func execLimited(asBytes, cpuSeconds int64, path string, argv, env []string) error {
	if asBytes > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: uint64(asBytes), Max: uint64(asBytes)}); err != nil {
			return err
		}
	}
	if cpuSeconds > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_CPU, &unix.Rlimit{Cur: uint64(cpuSeconds), Max: uint64(cpuSeconds) + 1}); err != nil {
			return err
		}
	}
	return syscall.Exec(path, argv, env)
}

// dropTo is Linux-only like the sandbox it serves.
func dropTo(uid, gid int) error {
	return errors.New("running tasks as another user is not supported on this system")
}
