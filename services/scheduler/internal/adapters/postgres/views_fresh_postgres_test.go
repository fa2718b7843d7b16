package postgres_test

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// Unapplied finds the task changes in the event store that task_views
// does not show yet, for one tenant or all; Applied sees them land.
func TestUnappliedChangesOfTheViews(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	views := postgres.TaskViews{DB: pool}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	view := func(id, tenant string, version int) {
		exec(`INSERT INTO task_views (id, tenant_id, status, priority, type, name, created_at, updated_at, version, doc)
			VALUES ($1, $2, 'pending', 5, 'shell', 'n', now(), now(), $3, '{}')
			ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version`, id, tenant, version)
	}
	event := func(kind, id, tenant string, version int) {
		exec(`INSERT INTO events (aggregate_type, aggregate_id, version, event_type, event_id, tenant_id, occurred_at, payload)
			VALUES ($1, $2, $3, 'E', gen_random_uuid(), $4, now(), '\x00')`, kind, id, version, tenant)
	}
	view("task-a", "t1", 1)
	event(postgres.AggregateType, "task-a", "t1", 1)
	event(postgres.AggregateType, "task-a", "t1", 2)
	event(postgres.AggregateType, "task-b", "t1", 1)
	event(postgres.AggregateType, "task-c", "t2", 1)
	// A group's events are not the task list's.
	event("task_group", "group-1", "t1", 1)

	unapplied := func(tenant string) []app.TaskVersion {
		t.Helper()
		got, err := views.Unapplied(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(a, b app.TaskVersion) int {
			return cmp.Or(strings.Compare(a.ID, b.ID), cmp.Compare(a.Version, b.Version))
		})
		return got
	}
	want := []app.TaskVersion{{ID: "task-a", Version: 2}, {ID: "task-b", Version: 1}}
	if got := unapplied("t1"); !slices.Equal(got, want) {
		t.Fatalf("Unapplied(t1) = %v, want %v", got, want)
	}
	if got := unapplied("*"); !slices.Equal(got, append(want, app.TaskVersion{ID: "task-c", Version: 1})) {
		t.Fatalf("Unapplied(*) = %v", got)
	}
	if done, err := views.Applied(ctx, want); err != nil || done {
		t.Fatalf("Applied before the projection = %v, %v", done, err)
	}
	view("task-a", "t1", 2)
	if done, err := views.Applied(ctx, want); err != nil || done {
		t.Fatalf("Applied with task-b missing = %v, %v", done, err)
	}
	view("task-b", "t1", 1)
	if done, err := views.Applied(ctx, want); err != nil || !done {
		t.Fatalf("Applied after the projection = %v, %v", done, err)
	}
	if got := unapplied("t1"); len(got) != 0 {
		t.Errorf("Unapplied(t1) once shown = %v", got)
	}
}
