package shim

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// A restarted agent finds in the journal the run directory of every attempt
// it had, but not always a shim pid: the agent may have died after it
// journaled the directory and before (or while) the shim started. Two files
// let it tell the cases apart without trusting pids:
//
//   - LockFile is held with an exclusive flock(2) by the shim serving the
//     directory, from its first moment to its exit. The kernel drops the
//     lock when the shim dies, however it dies, so "locked" means "a shim
//     is alive here" (perhaps not yet listening).
//   - SpawnedFile is written just before the shim forks the task. Without
//     it, no task process was ever started from this directory, so running
//     the attempt afresh cannot run it twice. With it and no status file,
//     the process may have run and its outcome is unknown.
const (
	LockFile    = "shim.lock"
	SpawnedFile = "spawned"
)

// alreadyServed is the readiness error of a shim that found another shim
// holding the directory's lock; it touched nothing.
const alreadyServed = "another shim serves this run directory"

// IsAlreadyServed reports whether a start failed because a shim was
// already serving the run directory (the agent should attach to it).
func IsAlreadyServed(err error) bool {
	var se *StartError
	return errors.As(err, &se) && se.Msg == alreadyServed
}

// lockRunDir takes the directory's lock for the life of the process. It
// returns errLocked when another process holds it.
func lockRunDir(runDir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(runDir, LockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("lock %s: %w", LockFile, err)
	}
	return f, nil
}

var errLocked = errors.New(alreadyServed)

// markSpawned records that the task's process is about to be started.
func markSpawned(runDir string) error {
	return os.WriteFile(filepath.Join(runDir, SpawnedFile), nil, 0o600)
}

// RunDirState is what a run directory says about its shim.
type RunDirState struct {
	// ShimAlive: a shim holds the directory's lock.
	ShimAlive bool
	// MayHaveRun: a task process may have been started from the
	// directory. The spawn marker, a status file or a shim answering on
	// the socket (one older than the lock) each say so; only when none
	// does is it certain that nothing ran.
	MayHaveRun bool
}

// Inspect reads a run directory's lock, marker, status file and socket. It
// takes the lock only for an instant, and only when nobody holds it.
func Inspect(runDir string) (RunDirState, error) {
	var st RunDirState
	f, err := lockRunDir(runDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st, nil // the directory is gone: no shim can be in it
	case errors.Is(err, errLocked):
		st.ShimAlive = true
	case err != nil:
		return st, err
	default:
		f.Close()
	}
	// Read after the lock: a shim that spawned and exited before it was
	// tried left its marker and status behind.
	for _, name := range []string{SpawnedFile, StatusFile} {
		if _, err := os.Stat(filepath.Join(runDir, name)); err == nil {
			st.MayHaveRun = true
		} else if !errors.Is(err, os.ErrNotExist) {
			return st, err
		}
	}
	if !st.MayHaveRun && !st.ShimAlive {
		if c, err := net.DialTimeout("unix", SocketPath(runDir), time.Second); err == nil {
			c.Close()
			st.MayHaveRun = true
		}
	}
	return st, nil
}
