package timerslack

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// self is the running program as the kernel holds it: executing it works
// even when its file was removed since the process started, but the
// process would then be named "exe" (the kernel names a process after the
// file it executes), so it is the fallback, not the first choice.
const self = "/proc/self/exe"

// Current is the calling thread's timer slack.
func Current() (time.Duration, error) {
	n, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("%w: PR_GET_TIMERSLACK: %v", ErrNotApplied, err)
	}
	return time.Duration(n), nil
}

func ensure(want time.Duration) error {
	// The slack is the thread's, and the image executed next inherits the
	// executing thread's: both must be this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cur, err := Current()
	if err != nil {
		return err
	}
	if cur == want {
		adoptInherited(cur)
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(want), 0, 0, 0); err != nil {
		return fmt.Errorf("%w: PR_SET_TIMERSLACK: %v", ErrNotApplied, err)
	}
	// Executing again only when the kernel took the value: otherwise the
	// next image would find it unchanged and execute again, for ever.
	if got, err := Current(); err != nil || got != want {
		return fmt.Errorf("%w: the kernel kept %s instead of %s", ErrNotApplied, got, want)
	}
	// The slack the process was started with goes to the next image, for
	// the processes it starts (StartChild); an image that executes again
	// after a refusal keeps the first value.
	if _, passed := os.LookupEnv(inheritedEnv); !passed {
		_ = os.Setenv(inheritedEnv, strconv.FormatInt(int64(cur), 10))
	}
	if path, err := os.Executable(); err == nil {
		_ = syscall.Exec(path, os.Args, os.Environ())
	}
	err = syscall.Exec(self, os.Args, os.Environ())
	_ = os.Unsetenv(inheritedEnv)
	return fmt.Errorf("%w: executing %s again: %v", ErrNotApplied, self, err)
}

// startAt runs start on a thread whose slack is want for the moment.
func startAt(want time.Duration, start func() error) error {
	// The child copies the slack of the thread that forks it, so the
	// setting, the fork and the setting back happen on one thread, and no
	// other goroutine runs on it meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cur, err := Current()
	if err != nil || cur == want {
		return start()
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(want), 0, 0, 0); err != nil {
		return start()
	}
	defer func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(cur), 0, 0, 0) }()
	return start()
}
