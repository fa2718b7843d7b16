package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app/apptest"
)

// The Postgres group and template stores keep the contract the
// orchestration use cases are tested against (with the fake of package
// apptest).
func TestPostgresKeepsTheOrchestrationContract(t *testing.T) {
	apptest.StoreContract(t, func(t *testing.T) apptest.Subject {
		pool := pgtest.New(t).Open(t, scheduler.Schema)
		tasks := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
		t.Cleanup(tasks.Close)
		return apptest.Subject{Groups: &postgres.GroupStore{DB: pool}, Templates: &postgres.TemplateStore{DB: pool},
			Move: func(t *testing.T, id string, to task.Status, now time.Time) {
				if _, err := tasks.Mutate(context.Background(), id, func(tk task.Task) ([]task.Record, error) {
					return apptest.MoveTask(tk, to, now), nil
				}); err != nil {
					t.Fatal(err)
				}
			},
			Task: func(t *testing.T, id string) (task.Task, bool) {
				var doc []byte
				if err := pool.QueryRow(context.Background(), `SELECT doc FROM tasks WHERE id = $1`, id).Scan(&doc); err != nil {
					return task.Task{}, false
				}
				tk, err := postgres.DecodeTaskDoc(doc)
				if err != nil {
					t.Fatal(err)
				}
				return tk, true
			}}
	})
}
