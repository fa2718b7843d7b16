package scheduler_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/archive"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// historyEnv is a loaded, published history and an archiver over it with
// a clock the test moves.
type historyEnv struct {
	pool    *pgxpool.Pool
	broker  *kafkatest.Broker
	objects objectstore.Store
	now     time.Time
	topic   string
}

func newHistoryEnv(t *testing.T) *historyEnv {
	t.Helper()
	ctx := context.Background()
	pool, err := pg.Open(ctx, pg.Config{URL: pgtest.New(t).URL, Schema: scheduler.Schema, MaxConns: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	objects, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: "http://127.0.0.1:1/objects",
		Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	e := &historyEnv{pool: pool, broker: kafkatest.New(t, kafkatest.WithPartitions(4)), objects: objects,
		now: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), topic: "history.archive"}
	if _, err := scheduler.LoadHistory(ctx, pool, scheduler.HistorySpec{Finished: 600, Pending: 30, Tenants: 4, Span: 30 * 24 * time.Hour,
		Now: e.now, Seed: 3, BatchSize: 200}); err != nil {
		t.Fatal(err)
	}
	if err := scheduler.PublishHistory(ctx, pool, e.broker.Config(), e.topic, 4, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *historyEnv) archiver(retention time.Duration, a app.HistoryArchive) *app.HistoryArchiver {
	if a == nil {
		a = archive.Archive{Objects: e.objects}
	}
	return &app.HistoryArchiver{Store: postgres.HistoryStore{DB: e.pool}, Archive: a,
		Lock: postgres.AdvisoryLock{DB: e.pool, Name: "scheduler:history"}, Now: func() time.Time { return e.now },
		Retention: retention, Batch: 100}
}

// ended returns the docs of the tasks that ended before cutoff, by id.
func (e *historyEnv) ended(t *testing.T, cutoff time.Time) map[string]domain.Task {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT doc FROM tasks
		WHERE (status IN ('completed', 'failed', 'cancelled') OR deleted) AND updated_at < $1`, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]domain.Task{}
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			t.Fatal(err)
		}
		task, err := postgres.DecodeTaskDoc(doc)
		if err != nil {
			t.Fatal(err)
		}
		out[task.ID] = task
	}
	return out
}

func (e *historyEnv) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The archiver moves the history of tasks that ended before the retention
// into archives and deletes it, and nothing else: the archives fold back
// into exactly the tasks that were deleted, the remaining tasks rows
// still equal their events, task_views equals its replay above the
// horizon, and a later pass with the clock moved on takes the next ones.
func TestHistoryArchiverArchivesEndedTasksAndForgetsThem(t *testing.T) {
	ctx := context.Background()
	e := newHistoryEnv(t)
	before := e.count(t, `SELECT count(*) FROM tasks`)
	cutoff := e.now.Add(-20 * 24 * time.Hour)
	want := e.ended(t, cutoff)
	if len(want) < 100 {
		t.Fatalf("only %d tasks ended before the cutoff; the history should have about a third of 600", len(want))
	}

	// A create's request id goes with the task it names (the first of the
	// create), and only then.
	var archivedTask, keptTask string
	for id := range want {
		archivedTask = id
		break
	}
	if err := e.pool.QueryRow(ctx, `SELECT id FROM tasks WHERE status = 'pending' LIMIT 1`).Scan(&keptTask); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO create_requests (tenant_id, request_id, task_ids, created_at)
		VALUES ('t', 'archived', $1, now()), ('t', 'kept', $2, now()), ('t', 'kept-first', $3, now())`,
		[]string{archivedTask}, []string{keptTask}, []string{keptTask, archivedTask}); err != nil {
		t.Fatal(err)
	}

	rep, err := e.archiver(20*24*time.Hour, nil).Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.count(t, `SELECT count(*) FROM create_requests WHERE request_id = 'archived'`); got != 0 {
		t.Errorf("the request id of an archived task is still recorded")
	}
	if got := e.count(t, `SELECT count(*) FROM create_requests WHERE request_id IN ('kept', 'kept-first')`); got != 2 {
		t.Errorf("%d of the 2 request ids of a task kept are still recorded", got)
	}
	if rep.Forgotten != len(want) || !rep.Cutoff.Equal(cutoff) || len(rep.Archived) != (len(want)+99)/100 {
		t.Fatalf("pass: %d forgotten in %d archives before %s; want %d in %d before %s",
			rep.Forgotten, len(rep.Archived), rep.Cutoff, len(want), (len(want)+99)/100, cutoff)
	}
	if !slices.IsSorted(rep.Archived) {
		t.Errorf("archive keys %v are not in age order", rep.Archived)
	}
	// Gone from every table; the rest stays.
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	for _, table := range []string{"tasks", "task_views"} {
		if n := e.count(t, `SELECT count(*) FROM `+table+` WHERE id = ANY($1)`, ids); n != 0 {
			t.Errorf("%d archived tasks still in %s", n, table)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM events WHERE aggregate_id = ANY($1)`, ids); n != 0 {
		t.Errorf("%d events of archived tasks still in the event store", n)
	}
	if n := e.count(t, `SELECT count(*) FROM tasks`); n != before-len(want) {
		t.Errorf("%d tasks left, want %d", n, before-len(want))
	}
	if n := e.count(t, `SELECT count(*) FROM tasks WHERE status = 'pending'`); n != 30 {
		t.Errorf("%d pending tasks left, want all 30", n)
	}

	// The archives fold back into the deleted tasks, event for event.
	folded := map[string]domain.Task{}
	for _, key := range rep.Archived {
		events, err := archive.Read(ctx, e.objects, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			_, r, err := codec.Unmarshal(ev.Payload)
			if err != nil {
				t.Fatalf("%s: event %s v%d: %v", key, ev.AggregateID, ev.Version, err)
			}
			task := domain.Apply(folded[ev.AggregateID], r)
			if task.Version != ev.Version {
				t.Fatalf("%s: %s folds to version %d at its event %d", key, ev.AggregateID, task.Version, ev.Version)
			}
			folded[ev.AggregateID] = task
		}
	}
	if len(folded) != len(want) {
		t.Errorf("archives hold %d tasks, want %d", len(folded), len(want))
	}
	for id, w := range want {
		if !postgres.SameDoc(folded[id], w) {
			t.Errorf("task %s from its archive differs from the deleted row", id)
		}
	}

	// What is left is consistent: the inline projection equals its events,
	// task_views its replay (archived rows left out of the comparison).
	rebuilt, err := scheduler.RebuildInlineProjection(ctx, e.pool, false)
	if err != nil {
		t.Fatal(err)
	}
	if rebuilt.Tasks != before-len(want) || len(rebuilt.Differences) != 0 {
		t.Errorf("rebuild: %d tasks, %d differ; want %d, none", rebuilt.Tasks, len(rebuilt.Differences), before-len(want))
	}
	spec := scheduler.ReplaySpecs(e.broker.Config())[0]
	spec.Topic = e.topic
	replayed, err := projection.Replay(ctx, e.pool, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !replayed.Equal() || replayed.Tables[0].LiveRows != int64(before-len(want)) {
		t.Errorf("replay: %+v; want equal, %d live rows compared", replayed.Tables, before-len(want))
	}

	// Nothing more at the same time; ten days later the next ones.
	if rep, err := e.archiver(20*24*time.Hour, nil).Pass(ctx); err != nil || rep.Forgotten != 0 {
		t.Errorf("second pass: %d forgotten, %v; want none", rep.Forgotten, err)
	}
	e.now = e.now.Add(10 * 24 * time.Hour)
	next := e.ended(t, e.now.Add(-20*24*time.Hour))
	if len(next) == 0 {
		t.Fatal("no task ended in the next ten days of history")
	}
	if rep, err := e.archiver(20*24*time.Hour, nil).Pass(ctx); err != nil || rep.Forgotten != len(next) {
		t.Errorf("pass ten days later: %d forgotten, %v; want %d", rep.Forgotten, err, len(next))
	}
}

// failingArchive refuses every write.
type failingArchive struct{}

func (failingArchive) Put(context.Context, string, []app.ArchivedTask) error {
	return errors.New("object store unavailable")
}

// No archive, no deletion: when the archive cannot be written the history
// stays in the database.
func TestHistoryArchiverKeepsHistoryItCouldNotArchive(t *testing.T) {
	e := newHistoryEnv(t)
	before := e.count(t, `SELECT count(*) FROM events`)
	rep, err := e.archiver(10*24*time.Hour, failingArchive{}).Pass(context.Background())
	if err == nil || rep.Forgotten != 0 {
		t.Fatalf("pass with a failing archive: %d forgotten, err %v; want an error and nothing forgotten", rep.Forgotten, err)
	}
	if n := e.count(t, `SELECT count(*) FROM events`); n != before {
		t.Errorf("%d events after a failed archive, want all %d", n, before)
	}
}

// A task that changed after it was read for archiving (its version moved)
// keeps its rows and events.
func TestHistoryArchiverKeepsATaskThatChanged(t *testing.T) {
	ctx := context.Background()
	e := newHistoryEnv(t)
	store := postgres.HistoryStore{DB: e.pool}
	tasks, err := store.Archivable(ctx, e.now.Add(-20*24*time.Hour), 10)
	if err != nil || len(tasks) != 10 {
		t.Fatalf("archivable: %d tasks, %v", len(tasks), err)
	}
	changed := tasks[3].ID
	if _, err := e.pool.Exec(ctx, `UPDATE tasks SET version = version + 1 WHERE id = $1`, changed); err != nil {
		t.Fatal(err)
	}
	n, err := store.Forget(ctx, tasks)
	if err != nil || n != 9 {
		t.Fatalf("forget: %d, %v; want 9 (the changed task kept)", n, err)
	}
	if got := e.count(t, `SELECT count(*) FROM events WHERE aggregate_id = $1`, changed); got == 0 {
		t.Error("the changed task's events were deleted")
	}
}

// One replica archives: while another holds the lock, Run does nothing;
// once it is free, Run archives.
func TestHistoryArchiverRunsWhereItHoldsTheLock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newHistoryEnv(t)
	held, ok, err := pg.TryLock(ctx, e.pool, "scheduler:history")
	if err != nil || !ok {
		t.Fatalf("take the lock: %v %v", ok, err)
	}
	before := e.count(t, `SELECT count(*) FROM tasks`)
	done := make(chan struct{})
	go func() { defer close(done); e.archiver(20*24*time.Hour, nil).Run(ctx, 20*time.Millisecond) }()
	time.Sleep(300 * time.Millisecond)
	if n := e.count(t, `SELECT count(*) FROM tasks`); n != before {
		t.Fatalf("%d tasks left while another replica held the lock, want all %d", n, before)
	}
	held.Release()
	eventually(t, 10*time.Second, "the archiver to take the lock and archive", func() bool {
		return e.count(t, `SELECT count(*) FROM tasks`) < before
	})
	cancel()
	<-done
}
