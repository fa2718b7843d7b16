package services

import (
	"fmt"
	"os"
	"sync"
)

// rotatingLog is a service's log file: when it would grow past max bytes
// it is renamed to name.1 (name.1 to name.2, …, keeping keep old files)
// and a new one is started, so a chatty service never fills the disk.
type rotatingLog struct {
	mu   sync.Mutex
	name string
	max  int64
	keep int
	f    *os.File
	size int64
}

func openLog(name string, max int64, keep int) (*rotatingLog, error) {
	l := &rotatingLog{name: name, max: max, keep: keep}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *rotatingLog) open() error {
	f, err := os.OpenFile(l.name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, info.Size()
	return nil
}

func (l *rotatingLog) rotate() error {
	l.f.Close()
	for i := l.keep - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", l.name, i), fmt.Sprintf("%s.%d", l.name, i+1))
	}
	if l.keep > 0 {
		_ = os.Rename(l.name, l.name+".1")
	} else {
		_ = os.Remove(l.name)
	}
	return l.open()
}

// Write implements io.Writer (the process's stdout or stderr).
func (l *rotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

// Close closes the current file.
func (l *rotatingLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}
