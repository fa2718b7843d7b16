package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// After Close, every write answers app.ErrStopping (the service is shutting
// down) rather than an error of the batching machinery.
func TestClosedTaskStoreAnswersStopping(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{})
	store.Close()
	ctx := context.Background()
	submit := domain.Submit(apptest.T0, "a", "t1", "u", "", "", apptest.Spec(t, "a"), "")
	_, err := store.Create(ctx, app.NewTasks{Tenant: "t1", At: apptest.T0, Tasks: [][]domain.Record{submit}})
	wantStopping(t, "create", err)
	_, err = store.Create(ctx, app.NewTasks{Tenant: "t1", RequestID: "r", At: apptest.T0, Tasks: [][]domain.Record{submit}})
	wantStopping(t, "idempotent create", err)
	_, err = store.Mutate(ctx, "a", func(domain.Task) ([]domain.Record, error) { return nil, nil })
	wantStopping(t, "mutate", err)
	_, err = store.Claim(ctx, "a1", "r", app.ClaimFilter{Tenant: "*", Limit: 1, Now: apptest.T0},
		func([]domain.Task) ([][]domain.Record, error) { return nil, nil })
	wantStopping(t, "claim", err)
}

func wantStopping(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, app.ErrStopping) || !errors.Is(err, pg.ErrCommitterClosed) {
		t.Errorf("%s after Close: err = %v, want app.ErrStopping", what, err)
	}
}

// A create whose records do not start with TaskSubmitted is refused.
func TestCreateRefusesRecordsThatAreNotASubmission(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{})
	defer store.Close()
	bad := []domain.Record{{At: apptest.T0, Event: domain.Deleted{}}}
	for _, n := range []app.NewTasks{
		{Tenant: "t1", At: apptest.T0, Tasks: [][]domain.Record{bad}},
		{Tenant: "t1", RequestID: "r", At: apptest.T0, Tasks: [][]domain.Record{bad}},
		{Tenant: "t1", At: apptest.T0, Tasks: [][]domain.Record{nil, nil}},
	} {
		if _, err := store.Create(context.Background(), n); err == nil {
			t.Errorf("create of %v was accepted", n.Tasks)
		}
	}
}
