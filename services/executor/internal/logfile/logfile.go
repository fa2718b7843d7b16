// Package logfile is the agent's own log on disk with size-based rotation
// (the log block {max_size_mb, retain_count, local_dir} of
// docs/executor.md): the
// log is <dir>/<name>.log; when a write would take it past the maximum
// size it becomes <name>.log.1, the older ones shift up, and only the
// newest retain_count files are kept (the current one included).
package logfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Config configures Open.
type Config struct {
	// Dir holds the log files (created 0750 if missing).
	Dir string
	// Name is the file's base name without ".log" (default "agent").
	Name string
	// MaxBytes is the size a file may reach (default 100 MB).
	MaxBytes int64
	// Retain is how many files are kept, the current one included
	// (default 7).
	Retain int
}

// Defaults: 100 MB files, seven kept (docs/executor.md).
const (
	DefaultMaxBytes = 100 << 20
	DefaultRetain   = 7
)

// Writer is an io.WriteCloser safe for concurrent use.
type Writer struct {
	cfg  Config
	path string

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Open opens (appending) the current log file.
func Open(cfg Config) (*Writer, error) {
	if cfg.Dir == "" {
		return nil, errors.New("logfile: no directory")
	}
	if cfg.Name == "" {
		cfg.Name = "agent"
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Retain <= 0 {
		cfg.Retain = DefaultRetain
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("logfile: %w", err)
	}
	w := &Writer{cfg: cfg, path: filepath.Join(cfg.Dir, cfg.Name+".log")}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("logfile: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("logfile: %w", err)
	}
	w.f, w.size = f, fi.Size()
	return nil
}

// Write appends p, rotating first when p would take the file past
// MaxBytes (a record larger than MaxBytes still goes whole into a fresh
// file: lines are never split).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return 0, os.ErrClosed
	}
	if w.size > 0 && w.size+int64(len(p)) > w.cfg.MaxBytes {
		if err := w.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := w.f.Write(p)
	w.size += int64(n)
	return n, err
}

// rotate shifts name.log.k to name.log.k+1 (dropping what passes Retain)
// and starts a new name.log. The caller holds w.mu.
func (w *Writer) rotate() error {
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("logfile: %w", err)
	}
	w.f = nil
	oldest := w.path + "." + strconv.Itoa(w.cfg.Retain-1)
	if err := os.Remove(oldest); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("logfile: %w", err)
	}
	for k := w.cfg.Retain - 2; k >= 1; k-- {
		from := w.path + "." + strconv.Itoa(k)
		if err := os.Rename(from, w.path+"."+strconv.Itoa(k+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("logfile: %w", err)
		}
	}
	if w.cfg.Retain > 1 {
		if err := os.Rename(w.path, w.path+".1"); err != nil {
			return fmt.Errorf("logfile: %w", err)
		}
	} else if err := os.Remove(w.path); err != nil {
		return fmt.Errorf("logfile: %w", err)
	}
	return w.open()
}

// Close closes the current file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
