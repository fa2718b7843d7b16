package agent

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Retention bounds what the agent keeps on disk (the cleanup block of
// docs/executor.md; docs/operations.md): the run and work directories of
// attempts that ended and were delivered go after MaxAge, the oldest
// first once together they pass MaxBytes; journal rows of delivered
// attempts go after JournalMaxAge. Nothing an active or undelivered
// attempt needs is ever removed.
type Retention struct {
	// MaxAge of local files (default 7 days).
	MaxAge time.Duration
	// MaxBytes of the run and work directories together (default 10 GB).
	MaxBytes int64
	// JournalMaxAge of delivered attempts' journal rows (default 7 days).
	JournalMaxAge time.Duration
	// Interval between cleanups (default 1 hour).
	Interval time.Duration
}

// Retention defaults.
const (
	DefaultLocalMaxAge   = 7 * 24 * time.Hour
	DefaultLocalMaxBytes = 10 << 30
)

func (r *Retention) defaults() {
	if r.MaxAge <= 0 {
		r.MaxAge = DefaultLocalMaxAge
	}
	if r.MaxBytes <= 0 {
		r.MaxBytes = DefaultLocalMaxBytes
	}
	if r.JournalMaxAge <= 0 {
		r.JournalMaxAge = DefaultLocalMaxAge
	}
	if r.Interval <= 0 {
		r.Interval = time.Hour
	}
}

// retentionLoop cleans up every Retention.Interval.
func (a *Agent) retentionLoop(ctx context.Context) {
	for {
		if _, err := a.CleanUp(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("cleanup failed", "err", err)
		}
		if !sleep(ctx, a.cfg.Retention.Interval) {
			return
		}
	}
}

// CleanUpReport says what one cleanup removed.
type CleanUpReport struct {
	JournalRows int64
	Dirs        int
	Bytes       int64
}

// localDir is a run or work directory and what it holds.
type localDir struct {
	path  string
	mtime time.Time
	bytes int64
}

// CleanUp prunes the journal and removes old local directories once (see
// Retention); the clock is the agent's.
func (a *Agent) CleanUp(ctx context.Context) (CleanUpReport, error) {
	var rep CleanUpReport
	now, r := a.now(), a.cfg.Retention
	n, err := a.journal.Prune(ctx, now.Add(-r.JournalMaxAge))
	if err != nil {
		return rep, err
	}
	rep.JournalRows = n
	// Read what must stay after pruning: a row pruned is delivered, so
	// its files may go too.
	attempts, tasks, err := a.journal.Held(ctx)
	if err != nil {
		return rep, err
	}
	dirs := a.localDirs(attempts, tasks)
	var total int64
	for _, d := range dirs {
		total += d.bytes
	}
	// Oldest first: past MaxAge they go anyway, and while the total is
	// over MaxBytes the oldest go first.
	slices.SortFunc(dirs, func(x, y localDir) int { return x.mtime.Compare(y.mtime) })
	for _, d := range dirs {
		if now.Sub(d.mtime) <= r.MaxAge && total <= r.MaxBytes {
			continue
		}
		if err := os.RemoveAll(d.path); err != nil {
			a.log.Warn("cleanup: remove", "dir", d.path, "err", err)
			continue
		}
		total -= d.bytes
		rep.Dirs++
		rep.Bytes += d.bytes
	}
	if rep != (CleanUpReport{}) {
		a.log.Info("cleanup", "journal_rows", rep.JournalRows, "dirs", rep.Dirs, "bytes", rep.Bytes)
	}
	return rep, nil
}

// localDirs lists the run directories (runs/<attempt>) and default work
// directories (<work root>/<task>) nothing held needs, with their newest
// modification time and size.
func (a *Agent) localDirs(attempts, tasks map[string]bool) []localDir {
	var out []localDir
	a.mu.Lock()
	for id, at := range a.runs {
		attempts[id], tasks[at.task.ID] = true, true
	}
	a.mu.Unlock()
	held := map[string]bool{}
	for id := range attempts {
		held[filepath.Join(a.cfg.DataDir, "runs", safeName(id))] = true
	}
	for id := range tasks {
		held[filepath.Join(a.cfg.WorkRoot, safeName(id))] = true
	}
	for _, root := range []string{filepath.Join(a.cfg.DataDir, "runs"), a.cfg.WorkRoot} {
		entries, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range entries {
			p := filepath.Join(root, e.Name())
			if !e.IsDir() || held[p] {
				continue
			}
			out = append(out, sizeOf(p))
		}
	}
	return out
}

// sizeOf sums a directory's files and finds its newest modification.
func sizeOf(dir string) localDir {
	d := localDir{path: dir}
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		if info.ModTime().After(d.mtime) {
			d.mtime = info.ModTime()
		}
		if info.Mode().IsRegular() {
			d.bytes += info.Size()
		}
		return nil
	})
	return d
}
