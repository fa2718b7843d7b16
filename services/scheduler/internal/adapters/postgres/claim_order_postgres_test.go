package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// A claim grouped behind other commands runs in a transaction whose id
// was taken before its candidates were last written. Leasing such a task
// would give its TaskLeased a lower transaction id than the event before
// it, and the relay, which publishes in transaction-id order, would put
// version N+1 ahead of version N on the topic. The claim leaves it for
// the next transaction; a fresh one gets it.
func TestClaimSkipsTasksWrittenByANewerTransaction(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
	t.Cleanup(store.Close)
	create := func(id string) {
		t.Helper()
		recs := domain.Submit(apptest.T0, id, "acme", "user", "", "", apptest.Spec(t, id), "")
		if _, err := store.Create(ctx, app.NewTasks{Tenant: "acme", At: apptest.T0, Tasks: [][]domain.Record{recs}}); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	filter := app.ClaimFilter{Tenant: "*", Limit: 10, Now: apptest.T0.Add(time.Minute)}

	create("older")
	grouped, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer grouped.Rollback(ctx)
	// An earlier command of the group wrote: the transaction has its id.
	if _, err := grouped.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	create("newer") // committed by a transaction with a higher id

	got, err := postgres.ClaimCandidates(ctx, grouped, filter)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "older" {
		t.Fatalf("grouped claim candidates = %v, want only the task written before the transaction took its id", taskIDs(got))
	}
	if err := grouped.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	fresh, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Rollback(ctx)
	got, err = postgres.ClaimCandidates(ctx, fresh, filter)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("fresh claim candidates = %v, want both tasks", taskIDs(got))
	}
}

func taskIDs(ts []domain.Task) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.ID
	}
	return out
}
