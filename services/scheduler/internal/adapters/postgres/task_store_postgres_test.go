package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, scheduler.Schema, scheduler.Migrations()...)
	}))
}

// The Postgres adapter keeps the contract the use cases are tested
// against (with the fake of package apptest).
func TestPostgresKeepsTheStoreContract(t *testing.T) {
	apptest.StoreContract(t, newSubject)
}

func newSubject(t *testing.T) apptest.Subject {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
	t.Cleanup(store.Close)
	return apptest.Subject{
		Stores: app.Stores{Tasks: store, Views: postgres.TaskViews{DB: pool}, Agents: postgres.Agents{DB: pool},
			Sweeps: postgres.SweepQueries{DB: pool}, Sweeper: postgres.SweeperLock{DB: pool}},
		SyncViews: func(t *testing.T) { syncViews(t, pool) },
	}
}

// syncViews writes task_views from the tasks rows, as the projection of
// the task topic would once it caught up.
func syncViews(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO task_views (id, tenant_id, status, priority, type, name, machine_id, assigned_machine_id, group_id,
			created_at, updated_at, deleted, version, doc)
		SELECT id, tenant_id, status, priority, type, doc->'spec'->>'name', machine_id, assigned_machine_id, group_id,
			created_at, updated_at, deleted, version, doc FROM tasks
		ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, assigned_machine_id = EXCLUDED.assigned_machine_id,
			updated_at = EXCLUDED.updated_at, deleted = EXCLUDED.deleted, version = EXCLUDED.version, doc = EXCLUDED.doc`)
	if err != nil {
		t.Fatalf("sync task_views: %v", err)
	}
}
