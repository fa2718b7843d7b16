package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// The sweeper bounds its preemption check, every second, by the lowest
// priority being run: max(priority) of the leased tasks. That must come
// from the end of tasks_leased_priority_idx. Read from the lease index, it
// visited every leased row and every dead version of one left since the
// last vacuum, hundreds of milliseconds a second under a burn-down
// (migration 0058).
func TestPreemptionBoundReadsTheLeasedPriorityIndex(t *testing.T) {
	w := newDepsWorld(t)
	w.createMany(200, nil)
	// A history of 40,000 tasks: most completed, a backlog pending, one
	// in fifty leased at priorities 1 to 9.
	w.copyTasks(200, `'h-' || g || '-' || t.id`,
		`CASE WHEN g % 50 = 0 THEN 'running' WHEN g % 10 = 1 THEN 'pending' ELSE 'completed' END`, `1 + g % 9`)
	check := func(when string) {
		t.Helper()
		plan := explain(t, w.pool, "EXPLAIN "+postgres.PreemptionSQL, time.Now(), 3, 20, domain.PriorityUrgent, domain.PriorityHigh)
		if !strings.Contains(plan, "Backward using tasks_leased_priority_idx on tasks") {
			t.Errorf("%s the preemption bound does not read tasks_leased_priority_idx:\n%s", when, plan)
		}
	}
	check("before ANALYZE")
	if _, err := w.pool.Exec(w.ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	check("after ANALYZE")
}

// The sweeper's periodic reads of the tasks table run on their keyed
// plans (readKeyed), which read the indexes whatever the statistics say.
// Planned from statistics, the search for pending tasks blocked by a
// failed dependency read every task in primary-key order (as a DISTINCT
// ON the task id, expecting a blocked task early under its LIMIT) or
// scanned the table (estimating many more pending tasks with
// dependencies than there were), and the search for groups whose members
// changed hashed the whole table to join a few hundred open members:
// 40–230 ms a sweep, several sweeps a second, under load on 2 cores.
func TestSweepsReadTheirIndexes(t *testing.T) {
	w := newDepsWorld(t)
	w.createMany(100, func(i int) []string {
		if i%10 == 9 {
			return []string{"t-0"}
		}
		return nil
	})
	// 60 copies of each: 1,700 pending, 170 of them with a dependency,
	// among 6,100 tasks.
	w.copyTasks(60, `lpad(g::text, 3, '0') || '-' || t.id`, `CASE WHEN g > 43 THEN 'pending' ELSE 'completed' END`, `t.priority`)
	if _, err := w.pool.Exec(w.ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	for range 2 { // on more than one connection, perhaps
		blocked, err := postgres.SweepQueries{DB: w.pool}.BlockedByFailure(w.ctx, 500)
		if err != nil || len(blocked) != 0 {
			t.Fatalf("blocked = %v, %v; want none (t-0 is pending)", blocked, err)
		}
		due, err := (&postgres.GroupStore{DB: w.pool}).Due(w.ctx, w.now, 100)
		if err != nil || len(due) != 0 {
			t.Fatalf("due groups = %v, %v; want none", due, err)
		}
	}
	pgtest.CheckKeyedPlans(t, w.ctx, w.pool, "after the sweeps", []string{"SELECT t.id, f.id FROM tasks t", "(SELECT id FROM task_groups WHERE wake_at"})
}
