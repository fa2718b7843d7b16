package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app/apptest"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// A member task that ends between the read of the group's facts and the
// decision's write (the last member completing while its group is
// cancelled) is not cancelled under a decision made on what it was: the
// decision is made again on the task as it is, which here ends the group
// by its members and refuses the cancel.
func TestGroupDecisionIsMadeAgainWhenAMemberEndedMeanwhile(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	tasks := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
	t.Cleanup(tasks.Close)
	groups := &postgres.GroupStore{DB: pool}
	at := apptest.T0
	ids := 0
	newID := func() string { ids++; return fmt.Sprintf("%08d-0000-7000-8000-%012d", ids, ids) }
	def, err := orch.Normalize(orch.Input{Mode: "parallel", Tasks: []orch.MemberInput{{ID: "a", Spec: task.SpecInput{Name: "a", Command: "true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	s, d := orch.Create(at, newID(), "tenant-a", "u", "", def, true, newID)
	st, _, err := groups.Create(ctx, oapp.NewGroup{State: s, Decision: d})
	if err != nil {
		t.Fatal(err)
	}
	a := st.Members["a"].TaskID
	move := func(to task.Status) {
		t.Helper()
		if _, err := tasks.Mutate(ctx, a, func(tk task.Task) ([]task.Record, error) {
			return apptest.MoveTask(tk, to, at.Add(time.Second)), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	move(task.StatusRunning)
	var seen []task.Status
	_, _, err = groups.Mutate(ctx, "tenant-a", st.Group.ID, oapp.Open,
		func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error) {
			seen = append(seen, facts[a].Status)
			if len(seen) == 1 {
				move(task.StatusCompleted) // after the facts were read
			}
			return s.Cancel(at.Add(2*time.Second), facts, "u", "")
		})
	if !errors.Is(err, task.ErrImmutable) || len(seen) != 2 || seen[0] != task.StatusRunning || seen[1] != task.StatusCompleted {
		t.Fatalf("cancel = %v after deciding on %v", err, seen)
	}
	var doc []byte
	if err := pool.QueryRow(ctx, `SELECT doc FROM tasks WHERE id = $1`, a).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	if tk, err := postgres.DecodeTaskDoc(doc); err != nil || tk.Status != task.StatusCompleted {
		t.Fatalf("task a = %s, %v", tk.Status, err)
	}
}
