package apptest_test

import (
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app/apptest"
)

// The fake passes the contract the Postgres stores pass, so app tests
// written against it hold for the real stores.
func TestFakeKeepsTheStoreContract(t *testing.T) {
	apptest.StoreContract(t, func(*testing.T) apptest.Subject {
		s := apptest.NewStore()
		return apptest.Subject{Groups: s, Templates: s.Templates(),
			Move: func(t *testing.T, id string, to task.Status, now time.Time) {
				if _, err := s.ChangeTask(id, func(tk task.Task) []task.Record { return apptest.MoveTask(tk, to, now) }); err != nil {
					t.Fatal(err)
				}
			},
			Task: func(_ *testing.T, id string) (task.Task, bool) { return s.Task(id) }}
	})
}
