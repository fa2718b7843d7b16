package postgres_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
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
// plans (pg.QueryKeyed), which read the indexes whatever the statistics say.
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

// An agent's heartbeat finds the attempts it holds by key in
// tasks_agent_idx: agent, status and attempt. Keyed by agent alone, the
// read walked every entry of the agent — its cancelled tasks, which stay,
// and the dead versions of its leases since the last vacuum — and
// filtered them (migration 0059).
func TestHeartbeatReadsFindTheAgentsTasksByKey(t *testing.T) {
	w := newDepsWorld(t)
	w.createMany(100, nil)
	// 4,100 tasks: agent-1's history of 1,000 cancelled tasks, its 100
	// running and 100 assigned; as many leased by each of two other
	// agents.
	w.copyTasks(40, `'h-' || g || '-' || t.id`, `CASE WHEN g % 4 = 0 THEN 'cancelled' WHEN g IN (1, 3, 5) THEN 'running'
		WHEN g IN (2, 6, 10) THEN 'assigned' ELSE 'completed' END`, `t.priority`)
	if _, err := w.pool.Exec(w.ctx, `UPDATE tasks SET attempt_id = 'att-' || id,
		agent_id = CASE WHEN split_part(id, '-', 2) IN ('3', '6') THEN 'agent-2' WHEN split_part(id, '-', 2) IN ('5', '10') THEN 'agent-3'
			ELSE 'agent-1' END
		WHERE status IN ('cancelled', 'running', 'assigned')`); err != nil {
		t.Fatal(err)
	}
	held := []string{"att-h-1-t-0", "att-h-1-t-1", "att-h-1-t-2", "att-h-2-t-0", "att-h-4-t-0", "att-gone"}
	reads, err := postgres.Agents{DB: w.pool}.Heartbeat(w.ctx, app.Agent{AgentID: "agent-1", MachineID: "m-1",
		LastHeartbeatAt: w.now, LostAfter: w.now.Add(time.Minute), Slots: 8}, held)
	if err != nil {
		t.Fatal(err)
	}
	// Three running, one assigned, one cancelled; the last is no task's.
	if len(reads.Held) != 5 {
		t.Errorf("held = %d tasks, want 5", len(reads.Held))
	}
	if len(reads.Unheld) != 99 || slices.Contains(reads.Unheld, "h-2-t-0") {
		t.Errorf("unheld = %d tasks (h-2-t-0 among them: %v), want the 99 assigned ones other than h-2-t-0",
			len(reads.Unheld), slices.Contains(reads.Unheld, "h-2-t-0"))
	}
	if _, err := w.pool.Exec(w.ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	// The held attempts' read finds each by key; before, its index
	// condition was the agent alone, and the attempts a filter.
	plan := explain(t, w.pool, "EXPLAIN "+postgres.ByAttemptsSQL, "agent-1", held)
	cond := ""
	for _, line := range strings.Split(plan, "\n") {
		if strings.Contains(line, "Index Cond:") {
			cond = line
		}
	}
	if !strings.Contains(plan, "tasks_agent_idx") || !strings.Contains(cond, "attempt_id = ANY") {
		t.Errorf("the held attempts' read does not find them by key in tasks_agent_idx:\n%s", plan)
	}
}

// The reads by key that run most often — a heartbeat's, a task's by id,
// the hub's check of which tasks are pending, a claim's look for an
// earlier claim of its request and for its agent's drain, its record of
// the agent as seen — run on their
// keyed plans:
// planned once per connection, not on every execution (about a
// millisecond each on the task table under load), and never by scanning
// a table.
func TestFrequentReadsRunOnTheirKeyedPlans(t *testing.T) {
	w := newDepsWorld(t)
	w.createMany(50, nil)
	leased := w.run()
	agents := postgres.Agents{DB: w.pool}
	for i := range 8 { // past the five executions a cached statement is custom-planned for
		reads, err := agents.Heartbeat(w.ctx, app.Agent{AgentID: "agent-1", MachineID: "m-1",
			LastHeartbeatAt: w.now, LostAfter: w.now.Add(time.Minute), Slots: 8}, []string{"attempt-" + leased[i]})
		if err != nil {
			t.Fatal(err)
		}
		// Every leased task runs: none is assigned and unheld.
		if len(reads.Held) != 1 || reads.Held[0].ID != leased[i] || len(reads.Unheld) != 0 {
			t.Fatalf("heartbeat holding %s: held %d, unheld %d", leased[i], len(reads.Held), len(reads.Unheld))
		}
		got, err := w.store.Get(w.ctx, "acme", leased[i])
		if err != nil || got.ID != leased[i] {
			t.Fatalf("get %s = %s, %v", leased[i], got.ID, err)
		}
		if _, err := w.store.Get(w.ctx, "another-tenant", leased[i]); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("get %s as another tenant: %v, want not found", leased[i], err)
		}
		pending, err := postgres.PendingTasks(w.ctx, w.pool, []string{leased[i], "t-unknown"})
		if err != nil || len(pending) != 0 {
			t.Fatalf("pending of a leased task = %v, %v", pending, err)
		}
		if drained, err := agents.Drained(w.ctx, "agent-1"); err != nil || drained {
			t.Fatalf("agent-1 drained = %v, %v; want not drained", drained, err)
		}
		if err := agents.Seen(w.ctx, app.Agent{AgentID: "agent-1", MachineID: "m-1", LastHeartbeatAt: w.now,
			LostAfter: w.now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	// The first prefix a statement starts with names it: Seen's upsert,
	// then the heartbeat's, which has more columns.
	pgtest.CheckKeyedPlans(t, w.ctx, w.pool, "after the reads", []string{
		"INSERT INTO agents (agent_id, machine_id, tenant_id, labels, ip, free_slots, first_seen_at, last_heartbeat_at, lost_after, lost) VALUES",
		"INSERT INTO agents", "SELECT EXISTS (SELECT 1 FROM agent_drains", "SELECT doc FROM tasks WHERE agent_id = $1",
		"SELECT doc FROM tasks WHERE status = 'preempted'", "SELECT id FROM tasks WHERE status = 'assigned'",
		"SELECT doc FROM tasks WHERE id = $1", "SELECT id FROM tasks WHERE id = ANY($1::text[]) AND status = 'pending'",
		"SELECT task_ids FROM claims WHERE agent_id = $1"})
}
