//go:build unix

package kafka

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile sits next to kfake's own files; kfake only reads the names it
// wrote, so an extra file in the directory is harmless.
const lockFile = "taskmesh-embedded.lock"

// lockDir takes an exclusive flock on dir. Two brokers writing the same
// segment files would interleave batches and corrupt the log, so a second
// broker (in this process or another, e.g. two `taskmesh dev`) must fail
// fast. The kernel drops the lock when the process dies, so a SIGKILLed
// broker never leaves a stale lock behind.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kafka: embedded broker lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("kafka: embedded broker data dir %s is in use by another broker", dir)
		}
		return nil, fmt.Errorf("kafka: embedded broker lock: %w", err)
	}
	return f, nil
}

func unlockDir(f *os.File) {
	// Closing the descriptor releases the flock.
	f.Close()
}
