package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Execer runs statements: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Agent is an executor agent as its heartbeats describe it.
type Agent struct {
	AgentID, MachineID, TenantID, IP string
	Labels                           []string
	FreeSlots                        int
	LastHeartbeatAt, LostAfter       time.Time
}

// Heartbeat records that an agent is alive until a.LostAfter.
func Heartbeat(ctx context.Context, db Execer, a Agent) error {
	_, err := db.Exec(ctx, `
		INSERT INTO agents (agent_id, machine_id, tenant_id, labels, ip, free_slots, first_seen_at, last_heartbeat_at, lost_after, lost)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, false)
		ON CONFLICT (agent_id) DO UPDATE SET machine_id = EXCLUDED.machine_id, tenant_id = EXCLUDED.tenant_id,
			labels = EXCLUDED.labels, ip = EXCLUDED.ip, free_slots = EXCLUDED.free_slots,
			last_heartbeat_at = EXCLUDED.last_heartbeat_at, lost_after = EXCLUDED.lost_after, lost = false`,
		a.AgentID, a.MachineID, a.TenantID, nonNil(a.Labels), a.IP, a.FreeSlots, a.LastHeartbeatAt, a.LostAfter)
	if err != nil {
		return fmt.Errorf("heartbeat of %s: %w", a.AgentID, err)
	}
	return nil
}

// LostAgents marks agents whose heartbeats stopped before now as lost and
// returns their ids.
func LostAgents(ctx context.Context, q Querier, now time.Time) ([]string, error) {
	rows, err := q.Query(ctx, `UPDATE agents SET lost = true WHERE NOT lost AND lost_after < $1 RETURNING agent_id`, now)
	if err != nil {
		return nil, fmt.Errorf("lost agents: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Machines returns the distinct machines of live agents that serve tenant
// and have every label in labels (for broadcast fan-out).
func Machines(ctx context.Context, q Querier, tenant string, labels []string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT machine_id FROM agents
		WHERE NOT lost AND (tenant_id = '' OR tenant_id = $1) AND labels @> $2::text[] ORDER BY machine_id`, tenant, nonNil(labels))
	if err != nil {
		return nil, fmt.Errorf("machines: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ExpiredLeases returns up to limit leased tasks whose lease ran out.
func ExpiredLeases(ctx context.Context, q Querier, now time.Time, limit int) ([]string, error) {
	return ids(ctx, q, `SELECT id FROM tasks WHERE status IN ('assigned', 'running') AND lease_expires_at < $1
		ORDER BY lease_expires_at LIMIT $2`, now, limit)
}

// LeasesOf returns the tasks an agent holds.
func LeasesOf(ctx context.Context, q Querier, agentID string) ([]string, error) {
	return ids(ctx, q, `SELECT id FROM tasks WHERE status IN ('assigned', 'running') AND agent_id = $1`, agentID)
}

// Overdue returns running tasks past timeout + grace + slack.
func Overdue(ctx context.Context, q Querier, now time.Time, slack time.Duration, limit int) ([]string, error) {
	return ids(ctx, q, `SELECT id FROM tasks WHERE status = 'running' AND timeout_at < $1 ORDER BY timeout_at LIMIT $2`,
		now.Add(-slack), limit)
}

// ReleasablePreempted returns preempted tasks whose preemptor finished or
// is gone, or that waited longer than maxWait. Tasks evicted for quota (with
// a cluster queue) are not among them: their preemptor is the quota
// service's business, and they return once their agent confirms the stop
// (see StrandedEvictions).
func ReleasablePreempted(ctx context.Context, q Querier, now time.Time, maxWait time.Duration, limit int) ([]string, error) {
	return ids(ctx, q, `SELECT t.id FROM tasks t LEFT JOIN tasks p ON p.id = t.preempted_by
		WHERE t.status = 'preempted' AND t.doc->>'cluster_queue' IS NULL AND (p.id IS NULL OR p.deleted OR p.status IN ('completed', 'failed', 'cancelled')
			OR t.updated_at < $1)
		LIMIT $2`, now.Add(-maxWait), limit)
}

// PreemptedOf returns the tasks with an admission (a cluster queue) that
// were preempted while agentID ran them; their quota comes back once the
// agent has stopped them.
func PreemptedOf(ctx context.Context, q Querier, agentID string) ([]domain.Task, error) {
	rows, err := q.Query(ctx, `SELECT doc FROM tasks WHERE status = 'preempted' AND agent_id = $1
		AND doc->>'cluster_queue' IS NOT NULL`, agentID)
	if err != nil {
		return nil, fmt.Errorf("preempted tasks of %s: %w", agentID, err)
	}
	return scanTasks(rows)
}

// StrandedEvictions returns preempted tasks with an admission whose agent
// is lost, or that are still preempted longer after the preemption than
// their grace period plus slack: no heartbeat will confirm they stopped.
func StrandedEvictions(ctx context.Context, q Querier, now time.Time, slack time.Duration, limit int) ([]string, error) {
	return ids(ctx, q, `SELECT t.id FROM tasks t LEFT JOIN agents a ON a.agent_id = t.agent_id
		WHERE t.status = 'preempted' AND t.doc->>'cluster_queue' IS NOT NULL
		  AND (a.agent_id IS NULL OR a.lost
		       OR t.updated_at + make_interval(secs => coalesce((t.doc->'spec'->>'grace_period_sec')::int, 0)) < $1)
		LIMIT $2`, now.Add(-slack), limit)
}

// PruneClaims forgets claim idempotency records older than before.
func PruneClaims(ctx context.Context, db Execer, before time.Time) error {
	_, err := db.Exec(ctx, `DELETE FROM claims WHERE created_at < $1`, before)
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
func BlockedByFailure(ctx context.Context, q Querier, limit int) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT ON (t.id) t.id, d.id FROM tasks t
		JOIN tasks d ON d.id = ANY(t.depends_on)
		WHERE t.status = 'pending' AND NOT t.deleted AND cardinality(t.depends_on) > 0
		  AND (d.status IN ('failed', 'cancelled') OR d.deleted)
		LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("blocked tasks: %w", err)
	}
	out := map[string]string{}
	var id, dep string
	_, err = pgx.ForEachRow(rows, []any{&id, &dep}, func() error { out[id] = dep; return nil })
	return out, err
}

// Preemption pairs a pending task with the running task it may replace.
type Preemption struct {
	Preemptor string
	Priority  int
	Victim    string
}

// PreemptionCandidates finds pending tasks created before waitedSince that
// no live agent with free slots could take, each with the lowest-priority,
// most recently started leased task (priority at least gap lower) on a
// machine that satisfies the pending task's constraints.
//
// It runs every sweep, so it must stay cheap with many pending tasks: only
// tasks that outrank the lowest-priority running work by gap can preempt
// anything, and that bound comes from an index before any task is looked at.
func PreemptionCandidates(ctx context.Context, q Querier, waitedSince time.Time, gap, limit int) ([]Preemption, error) {
	rows, err := q.Query(ctx, `
		WITH bound AS (
			SELECT max(priority) AS lowest FROM tasks WHERE status IN ('assigned', 'running')
		), waiting AS (
			SELECT p.* FROM tasks p, bound
			WHERE p.status = 'pending' AND NOT p.deleted AND NOT p.awaiting_admission AND p.priority <= bound.lowest - $2
			  AND p.created_at < $1 AND p.retry_at < $1
			ORDER BY p.priority, p.created_at
			LIMIT $3 * 4
		)
		SELECT p.id, p.priority, v.id
		FROM waiting p
		CROSS JOIN LATERAL (
			SELECT r.id FROM tasks r JOIN agents ag ON ag.agent_id = r.agent_id AND NOT ag.lost
			WHERE r.status IN ('assigned', 'running') AND r.priority - p.priority >= $2
			  AND (p.tenant_id = ag.tenant_id OR ag.tenant_id = '')
			  AND (p.machine_id = '' OR p.machine_id = ag.machine_id)
			  AND p.labels <@ ag.labels
			ORDER BY r.priority DESC, r.doc->>'started_at' DESC NULLS FIRST
			LIMIT 1) v
		WHERE NOT EXISTS (SELECT 1 FROM tasks x WHERE x.status = 'preempted' AND x.preempted_by = p.id)
		  AND NOT EXISTS (
			SELECT 1 FROM agents ag WHERE NOT ag.lost AND ag.free_slots > 0
			  AND (p.tenant_id = ag.tenant_id OR ag.tenant_id = '')
			  AND (p.machine_id = '' OR p.machine_id = ag.machine_id)
			  AND p.labels <@ ag.labels)
		ORDER BY p.priority, p.created_at
		LIMIT $3`, waitedSince, gap, limit)
	if err != nil {
		return nil, fmt.Errorf("preemption candidates: %w", err)
	}
	var out []Preemption
	var pp Preemption
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
