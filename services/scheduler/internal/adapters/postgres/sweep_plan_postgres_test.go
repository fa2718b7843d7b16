package postgres_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
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
	recs := make([][]domain.Record, 0, 200)
	for i := range 200 {
		recs = append(recs, w.submit(fmt.Sprint("t-", i)))
	}
	if _, err := w.store.Create(w.ctx, app.NewTasks{Tenant: "acme", At: w.now, Tasks: recs}); err != nil {
		t.Fatal(err)
	}
	// A history of 40,000 tasks: most completed, a backlog pending, one
	// in fifty leased at priorities 1 to 9.
	const cols = `tenant_id, type, machine_id, target_ip, labels, depends_on, fanout_id, scatter,
		retry_at, created_at, updated_at, version, deleted, awaiting_admission, awaiting_dependencies, doc`
	if _, err := w.pool.Exec(w.ctx, `INSERT INTO tasks (id, status, priority, `+cols+`)
		SELECT 'h-' || g || '-' || t.id,
		       CASE WHEN g % 50 = 0 THEN 'running' WHEN g % 10 = 1 THEN 'pending' ELSE 'completed' END,
		       1 + g % 9, `+cols+`
		FROM tasks t, generate_series(1, 200) g`); err != nil {
		t.Fatal(err)
	}
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
