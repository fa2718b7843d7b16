package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskmesh/taskmesh/platform/eventstore"
)

// ArchivedTask is a task whose history leaves the database: its events
// (every one, in version order) and the version and time of its last
// change, which Forget checks are still current.
type ArchivedTask struct {
	ID        string
	Version   int64
	UpdatedAt time.Time
	Events    []eventstore.Event
}

// HistoryStore reads the history that may leave the database and deletes
// it (adapters/postgres).
type HistoryStore interface {
	// Archivable returns up to limit tasks that ended (completed, failed,
	// cancelled) or were deleted before cutoff, whose events are all
	// published and on which no open task depends, oldest change first
	// ((updated_at, id) order), each with all its events.
	Archivable(ctx context.Context, cutoff time.Time, limit int) ([]ArchivedTask, error)
	// Forget deletes, in one transaction, the events, the tasks row, the
	// task_views row and the create request id naming it (the first task
	// of a create) of every task that has not changed since it was read
	// (its version), and moves the archive horizon up to the last of
	// them. It returns how many it deleted; a task that changed is kept
	// and comes back in a later pass.
	Forget(ctx context.Context, tasks []ArchivedTask) (int, error)
}

// HistoryArchive keeps the events of the tasks Forget deletes
// (adapters/archive), readable back.
type HistoryArchive interface {
	// Put writes one archive object under key. It must have succeeded
	// before the tasks are forgotten.
	Put(ctx context.Context, key string, tasks []ArchivedTask) error
}

// HistoryArchiver moves the history of long-ended tasks out of the
// database into the object store (docs/operations.md, "Database size";
// docs/decisions/0085-history-stays-out-of-the-hot-paths.md). One pass,
// batch by batch, oldest first:
//
//  1. read up to Batch tasks that ended before now − Retention, with
//     every event of each;
//  2. write them to one archive object (gzip JSON lines, one event per
//     line, the envelope bytes as the relay published them);
//  3. only then delete their events, tasks rows and task_views rows, in
//     one transaction, and move the horizon (which `taskmesh replay`
//     compares above).
//
// A crash between 2 and 3 leaves an archive whose tasks are still in the
// database; the next pass archives them again. Readers of archives keep
// the first copy of each (aggregate, version). Run it from one replica
// (Run holds a lock).
type HistoryArchiver struct {
	Store   HistoryStore
	Archive HistoryArchive
	Lock    SweeperLock
	Now     func() time.Time
	// Retention is how long an ended task stays in the database.
	Retention time.Duration
	// Batch is the most tasks per archive object (default 1000).
	Batch int
	Log   *slog.Logger
}

// HistoryReport says what one pass did.
type HistoryReport struct {
	Cutoff    time.Time
	Archived  []string // object keys written
	Forgotten int      // tasks deleted from the database
}

// Pass archives and forgets every task that ended before the retention
// allows at the clock's now.
func (h *HistoryArchiver) Pass(ctx context.Context) (HistoryReport, error) {
	batch := h.Batch
	if batch <= 0 {
		batch = 1000
	}
	rep := HistoryReport{Cutoff: h.Now().UTC().Add(-h.Retention)}
	for ctx.Err() == nil {
		tasks, err := h.Store.Archivable(ctx, rep.Cutoff, batch)
		if err != nil {
			return rep, fmt.Errorf("archive history: %w", err)
		}
		if len(tasks) == 0 {
			return rep, nil
		}
		key := HistoryArchiveKey(tasks[0])
		if err := h.Archive.Put(ctx, key, tasks); err != nil {
			return rep, fmt.Errorf("archive history: write %s: %w", key, err)
		}
		rep.Archived = append(rep.Archived, key)
		n, err := h.Store.Forget(ctx, tasks)
		if err != nil {
			return rep, fmt.Errorf("archive history: forget the tasks of %s: %w", key, err)
		}
		rep.Forgotten += n
		if n == 0 {
			// Every task changed since it was read: the next pass takes
			// them again rather than this one spinning on them.
			return rep, nil
		}
	}
	return rep, ctx.Err()
}

// HistoryArchivePrefix is where task history archives live in the object
// store.
const HistoryArchivePrefix = "archive/tasks/"

// HistoryArchiveKey names the archive whose oldest task is first: by the
// day that task last changed, then its time and id, so keys sort by age.
func HistoryArchiveKey(first ArchivedTask) string {
	at := first.UpdatedAt.UTC()
	return fmt.Sprintf("%s%s/%s-%s.jsonl.gz", HistoryArchivePrefix, at.Format("2006/01/02"), at.Format("150405.000000000"), first.ID)
}

// Run makes a pass every interval while this replica holds the lock.
func (h *HistoryArchiver) Run(ctx context.Context, every time.Duration) {
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for ctx.Err() == nil {
		lock, ok, err := h.Lock.TryLock(ctx)
		if err != nil || !ok {
			sleep(ctx, every)
			continue
		}
		for ctx.Err() == nil {
			if err := lock.Alive(ctx); err != nil {
				break
			}
			rep, err := h.Pass(ctx)
			if err != nil && ctx.Err() == nil {
				log.Error("task history archiving failed", "err", err, "archived", len(rep.Archived), "forgotten", rep.Forgotten)
			} else if rep.Forgotten > 0 {
				log.Info("task history archived", "before", rep.Cutoff, "tasks", rep.Forgotten, "archives", len(rep.Archived))
			}
			sleep(ctx, every)
		}
		lock.Release()
	}
}
