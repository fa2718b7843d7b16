package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// SweepQueries is app.SweepQueries over the tasks and agents tables.
type SweepQueries struct{ DB *pgxpool.Pool }

// LostAgents implements app.SweepQueries.
func (q SweepQueries) LostAgents(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := q.DB.Query(ctx, `WITH l AS (UPDATE agents SET lost = true WHERE NOT lost AND lost_after < $1 RETURNING agent_id, heartbeats)
		SELECT agent_id FROM l WHERE heartbeats`, now)
	if err != nil {
		return nil, fmt.Errorf("lost agents: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// LatestHeartbeat implements app.SweepQueries. The agents table holds one
// row per agent, so the scan is small; the sweeper asks only in the minutes
// after it took over.
func (q SweepQueries) LatestHeartbeat(ctx context.Context) (time.Time, error) {
	var at *time.Time
	if err := q.DB.QueryRow(ctx, `SELECT max(last_heartbeat_at) FROM agents`).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("latest heartbeat: %w", err)
	}
	if at == nil {
		return time.Time{}, nil
	}
	return *at, nil
}

// ExpiredLeases returns up to limit leased tasks whose lease ran out.
func (q SweepQueries) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]string, error) {
	return ids(ctx, q.DB, `SELECT id FROM tasks WHERE status IN ('assigned', 'running') AND lease_expires_at < $1
		ORDER BY lease_expires_at LIMIT $2`, now, limit)
}

// LeasesOf returns the tasks an agent holds.
func (q SweepQueries) LeasesOf(ctx context.Context, agentID string) ([]string, error) {
	return ids(ctx, q.DB, `SELECT id FROM tasks WHERE status IN ('assigned', 'running') AND agent_id = $1`, agentID)
}

// Overdue returns running tasks past timeout + grace + slack.
func (q SweepQueries) Overdue(ctx context.Context, now time.Time, slack time.Duration, limit int) ([]string, error) {
	return ids(ctx, q.DB, `SELECT id FROM tasks WHERE status = 'running' AND timeout_at < $1 ORDER BY timeout_at LIMIT $2`,
		now.Add(-slack), limit)
}

// ReleasablePreempted returns preempted tasks whose preemptor finished or
// is gone, or that waited longer than maxWait. Tasks evicted for quota (with
// a cluster queue) are not among them: their preemptor is the quota
// service's business, and they return once their agent confirms the stop
// (see StrandedEvictions).
func (q SweepQueries) ReleasablePreempted(ctx context.Context, now time.Time, maxWait time.Duration, limit int) ([]string, error) {
	return ids(ctx, q.DB, `SELECT t.id FROM tasks t LEFT JOIN tasks p ON p.id = t.preempted_by
		WHERE t.status = 'preempted' AND t.doc->>'cluster_queue' IS NULL AND (p.id IS NULL OR p.deleted OR p.status IN ('completed', 'failed', 'cancelled')
			OR t.updated_at < $1)
		LIMIT $2`, now.Add(-maxWait), limit)
}

// StrandedEvictions returns preempted tasks with an admission whose agent
// is lost, or that are still preempted longer after the preemption than
// their grace period plus slack: no heartbeat will confirm they stopped.
func (q SweepQueries) StrandedEvictions(ctx context.Context, now time.Time, slack time.Duration, limit int) ([]string, error) {
	return ids(ctx, q.DB, `SELECT t.id FROM tasks t LEFT JOIN agents a ON a.agent_id = t.agent_id
		WHERE t.status = 'preempted' AND t.doc->>'cluster_queue' IS NOT NULL
		  AND (a.agent_id IS NULL OR a.lost
		       OR t.updated_at + make_interval(secs => coalesce((t.doc->'spec'->>'grace_period_sec')::int, 0)) < $1)
		LIMIT $2`, now.Add(-slack), limit)
}

// PruneClaims forgets claim idempotency records older than before.
func (q SweepQueries) PruneClaims(ctx context.Context, before time.Time) error {
	_, err := q.DB.Exec(ctx, `DELETE FROM claims WHERE created_at < $1`, before)
	if err != nil {
		return fmt.Errorf("prune claims: %w", err)
	}
	return nil
}

func ids(ctx context.Context, q Querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// BlockedByFailure returns pending tasks (up to limit) with a dependency
// that failed or was cancelled or deleted, mapped to that dependency.
//
// The statement asks each pending task with dependencies (tasks_blocked_idx,
// its predicate spelled out) for one such dependency, with no order over
// the tasks. An order (a DISTINCT ON the task id, as it was) let the
// planner read the whole table in primary-key order instead, expecting a
// blocked task early under the LIMIT; with none blocked, which is the
// usual case, that read every task on every sweep: 200–800 ms each on a
// 2-core machine under load, with a parallel worker started for it.
//
// It runs on its keyed plan (pg.QueryKeyed): even without an order, a plan
// made from statistics that counted many more pending tasks with
// dependencies than there were read the table instead of the index
// (about 1,300 pages for 63 such tasks, 40 ms a sweep on average).
func (q SweepQueries) BlockedByFailure(ctx context.Context, limit int) (map[string]string, error) {
	out := map[string]string{}
	err := pg.QueryKeyed(ctx, q.DB, func(rows pgx.Rows) error {
		var id, dep string
		_, err := pgx.ForEachRow(rows, []any{&id, &dep}, func() error { out[id] = dep; return nil })
		return err
	}, blockedByFailureSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("blocked tasks: %w", err)
	}
	return out, nil
}

const blockedByFailureSQL = `SELECT t.id, f.id FROM tasks t
		CROSS JOIN LATERAL (SELECT d.id FROM tasks d
			WHERE d.id = ANY(t.depends_on) AND (d.status IN ('failed', 'cancelled') OR d.deleted)
			ORDER BY d.id LIMIT 1) f
		WHERE t.status = 'pending' AND NOT t.deleted AND cardinality(t.depends_on) > 0
		LIMIT $1`

// ReleasableHeld returns pending tasks (up to limit, oldest first) held
// out of their ClusterQueue for dependencies that have all completed.
// awaiting_dependencies is cleared by the commit that completes the last
// of them; the check is made again here because a manual retry can make a
// dependent pending again behind a dependency that failed.
func (q SweepQueries) ReleasableHeld(ctx context.Context, limit int) ([]string, error) {
	rows, err := q.DB.Query(ctx, `SELECT t.id FROM tasks t
		WHERE t.held_for_dependencies AND t.status = 'pending' AND NOT t.deleted AND NOT t.awaiting_dependencies
		  AND NOT EXISTS (`+unmetDependency+`)
		ORDER BY t.created_at LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("held tasks: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// AnyHeld reports whether any pending task is held for its dependencies.
func (q SweepQueries) AnyHeld(ctx context.Context) (bool, error) {
	var held bool
	err := q.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE held_for_dependencies AND status = 'pending' AND NOT deleted)`).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("held tasks: %w", err)
	}
	return held, nil
}

// preemptionSQL is PreemptionCandidates' statement: $1 the time before
// which a pending task must have been created, $2 the priority gap, $3
// the limit, $4 the urgent priority and $5 the high one. Its priority
// conditions are domain.PreemptsByPriority's.
const preemptionSQL = `
		WITH waiting AS (
			-- The bound is a scalar subquery, not a joined row, so it is
			-- an index condition on tasks_claim_idx: with a month of
			-- history a join made it a scan of the whole table. It is
			-- read from the end of tasks_leased_priority_idx: the
			-- lowest-priority running work less the gap, or the urgent
			-- priority when that work is of high priority or lower.
			SELECT p.* FROM tasks p
			WHERE p.status = 'pending' AND NOT p.deleted AND NOT p.awaiting_admission AND NOT p.awaiting_dependencies
			  AND p.priority <= (SELECT greatest(max(priority) - $2, CASE WHEN max(priority) >= $5::int THEN $4::int END)
			                     FROM tasks WHERE status IN ('assigned', 'running'))
			  AND p.created_at < $1 AND p.retry_at < $1
			ORDER BY p.priority, p.created_at
			LIMIT $3 * 4
		)
		SELECT p.id, p.priority, v.id
		FROM waiting p
		CROSS JOIN LATERAL (
			SELECT r.id FROM tasks r JOIN agents ag ON ag.agent_id = r.agent_id AND NOT ag.lost
			WHERE r.status IN ('assigned', 'running') AND r.doc->>'cluster_queue' IS NULL
			  AND (r.priority - p.priority >= $2 OR (p.priority = $4::int AND r.priority >= $5::int))
			  AND (p.tenant_id = ag.tenant_id OR ag.tenant_id = '')
			  AND (p.machine_id = '' OR p.machine_id = ag.machine_id)
			  AND p.labels <@ ag.labels
			ORDER BY r.priority DESC, (r.doc->>'started_at')::timestamptz DESC NULLS FIRST
			LIMIT 1) v
		WHERE NOT EXISTS (SELECT 1 FROM tasks x WHERE x.status = 'preempted' AND x.preempted_by = p.id)
		  AND NOT EXISTS (
			SELECT 1 FROM agents ag WHERE NOT ag.lost AND ag.free_slots > 0
			  AND (p.tenant_id = ag.tenant_id OR ag.tenant_id = '')
			  AND (p.machine_id = '' OR p.machine_id = ag.machine_id)
			  AND p.labels <@ ag.labels)
		ORDER BY p.priority, p.created_at
		LIMIT $3`

// PreemptionCandidates finds pending tasks created before waitedSince that
// no live agent with free slots could take, each with the lowest-priority,
// most recently started leased task outside admission queues it may preempt
// (domain.PreemptsByPriority) on a machine that satisfies the pending
// task's constraints. started_at is
// compared as a time: as text, RFC 3339 with trimmed fractions does not
// sort in time order.
//
// It runs every sweep, so it must stay cheap with many pending tasks: only
// tasks that may preempt the lowest-priority running work can preempt
// anything, and that bound comes from an index before any task is looked at.
func (q SweepQueries) PreemptionCandidates(ctx context.Context, waitedSince time.Time, gap, limit int) ([]app.Preemption, error) {
	rows, err := q.DB.Query(ctx, preemptionSQL, waitedSince, gap, limit, domain.PriorityUrgent, domain.PriorityHigh)
	if err != nil {
		return nil, fmt.Errorf("preemption candidates: %w", err)
	}
	var out []app.Preemption
	var pp app.Preemption
	_, err = pgx.ForEachRow(rows, []any{&pp.Preemptor, &pp.Priority, &pp.Victim}, func() error { out = append(out, pp); return nil })
	if err != nil {
		return nil, fmt.Errorf("preemption candidates: %w", err)
	}
	// One victim per preemptor and one preemptor per victim.
	seen := map[string]bool{}
	kept := out[:0]
	for _, p := range out {
		if !seen[p.Victim] {
			seen[p.Victim] = true
			kept = append(kept, p)
		}
	}
	return kept, nil
}

// SweeperLock is app.SweeperLock: a session-level advisory lock (pg.Lock)
// held on a connection of its own while this replica sweeps.
type SweeperLock struct{ DB *pgxpool.Pool }

// TryLock implements app.SweeperLock.
func (l SweeperLock) TryLock(ctx context.Context) (app.HeldLock, bool, error) {
	lock, ok, err := pg.TryLock(ctx, l.DB, "scheduler:sweeper")
	if err != nil || !ok {
		return nil, false, err // never a typed nil inside the interface
	}
	return lock, true, nil
}

// AdvisoryLock is a lock like SweeperLock under another name: the one
// replica that does some other periodic work (Name, e.g. "scheduler:groups").
type AdvisoryLock struct {
	DB   *pgxpool.Pool
	Name string
}

// TryLock implements app.SweeperLock.
func (l AdvisoryLock) TryLock(ctx context.Context) (app.HeldLock, bool, error) {
	lock, ok, err := pg.TryLock(ctx, l.DB, l.Name)
	if err != nil || !ok {
		return nil, false, err
	}
	return lock, true, nil
}
