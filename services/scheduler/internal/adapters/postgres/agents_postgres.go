package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// Agents is app.AgentRegistry over the agents table: operational state
// that heartbeats overwrite, not events.
type Agents struct{ DB *pgxpool.Pool }

// Heartbeat implements app.AgentRegistry: the upsert and the four reads go
// in one batch, so one connection and one round trip (the batch runs as
// one implicit transaction: the reads see the upsert, and a failure undoes
// it). The reads of the agent's tasks use tasks_agent_idx (agent, status,
// attempt), the held attempts by key.
func (g Agents) Heartbeat(ctx context.Context, a app.Agent, held []string) (app.HeartbeatReads, error) {
	var r app.HeartbeatReads
	held = nonNil(held)
	b := &pgx.Batch{}
	// Every statement of the batch finds its rows by key: on their keyed
	// plans (pg.QueueKeyedPlans) they are planned once per connection, not
	// on every heartbeat (about 4 ms of planning a heartbeat under load on
	// 2 cores, more than running them).
	pg.QueueKeyedPlans(b)
	b.Queue(`
		INSERT INTO agents (agent_id, machine_id, tenant_id, labels, ip, free_slots, first_seen_at, last_heartbeat_at, lost_after, lost,
			slots, version, isolation, warnings, heartbeats)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, false, $9, $10, $11, $12, true)
		ON CONFLICT (agent_id) DO UPDATE SET machine_id = EXCLUDED.machine_id, tenant_id = EXCLUDED.tenant_id,
			labels = EXCLUDED.labels, ip = EXCLUDED.ip, free_slots = EXCLUDED.free_slots,
			last_heartbeat_at = EXCLUDED.last_heartbeat_at, lost_after = EXCLUDED.lost_after, lost = false, heartbeats = true,
			slots = EXCLUDED.slots, version = EXCLUDED.version, isolation = EXCLUDED.isolation, warnings = EXCLUDED.warnings`,
		a.AgentID, a.MachineID, a.TenantID, nonNil(a.Labels), a.IP, a.FreeSlots, a.LastHeartbeatAt, a.LostAfter,
		a.Slots, a.Version, a.Isolation, nonNil(a.Warnings))
	b.Queue(drainedSQL, a.AgentID).QueryRow(func(row pgx.Row) error { return row.Scan(&r.Drained) })
	if len(held) > 0 {
		b.Queue(byAttemptsSQL, a.AgentID, held).Query(func(rows pgx.Rows) (err error) {
			r.Held, err = scanTasks(rows)
			return err
		})
	}
	b.Queue(preemptedOfSQL, a.AgentID).Query(func(rows pgx.Rows) (err error) {
		r.Preempted, err = scanTasks(rows)
		return err
	})
	b.Queue(unheldSQL, a.AgentID, held).Query(func(rows pgx.Rows) (err error) {
		r.Unheld, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err := g.DB.SendBatch(ctx, b).Close(); err != nil {
		return app.HeartbeatReads{}, fmt.Errorf("heartbeat of %s: %w", a.AgentID, err)
	}
	return r, nil
}

// Seen implements app.AgentRegistry. Every claim records its agent as
// seen: the upsert, by key, runs on its keyed plan (pg.QueueKeyedPlans),
// in a batch of its own.
func (g Agents) Seen(ctx context.Context, a app.Agent) error {
	b := &pgx.Batch{}
	pg.QueueKeyedPlans(b)
	b.Queue(`
		INSERT INTO agents (agent_id, machine_id, tenant_id, labels, ip, free_slots, first_seen_at, last_heartbeat_at, lost_after, lost)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, false)
		ON CONFLICT (agent_id) DO UPDATE SET machine_id = EXCLUDED.machine_id, tenant_id = EXCLUDED.tenant_id,
			labels = EXCLUDED.labels, ip = EXCLUDED.ip, free_slots = EXCLUDED.free_slots,
			last_heartbeat_at = EXCLUDED.last_heartbeat_at, lost_after = EXCLUDED.lost_after, lost = false`,
		a.AgentID, a.MachineID, a.TenantID, nonNil(a.Labels), a.IP, a.FreeSlots, a.LastHeartbeatAt, a.LostAfter)
	if err := g.DB.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("agent %s seen: %w", a.AgentID, err)
	}
	return nil
}

// Fleet implements app.AgentRegistry.
func (g Agents) Fleet(ctx context.Context, ids []string) ([]app.FleetAgent, error) {
	rows, err := g.DB.Query(ctx, `
		WITH known AS (SELECT agent_id FROM agents UNION SELECT agent_id FROM agent_drains)
		SELECT k.agent_id, a.agent_id IS NOT NULL, coalesce(a.machine_id, ''), coalesce(a.tenant_id, ''),
			coalesce(a.labels, '{}'), coalesce(a.ip, ''), coalesce(a.free_slots, 0), coalesce(a.slots, 0),
			coalesce(a.version, ''), coalesce(a.isolation, ''), coalesce(a.warnings, '{}'),
			a.first_seen_at, a.last_heartbeat_at, a.lost_after, coalesce(a.lost, false), d.drained_at,
			array(SELECT t.id FROM tasks t WHERE t.agent_id = k.agent_id AND t.status IN ('assigned', 'running') ORDER BY t.id)
		FROM known k LEFT JOIN agents a ON a.agent_id = k.agent_id LEFT JOIN agent_drains d ON d.agent_id = k.agent_id
		WHERE cardinality($1::text[]) = 0 OR k.agent_id = ANY($1::text[])
		ORDER BY k.agent_id`, nonNil(ids))
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (app.FleetAgent, error) {
		var (
			f                          app.FleetAgent
			firstSeen, last, lostAfter *time.Time
			drainedAt                  *time.Time
		)
		err := row.Scan(&f.AgentID, &f.Seen, &f.MachineID, &f.TenantID, &f.Labels, &f.IP, &f.FreeSlots, &f.Slots,
			&f.Version, &f.Isolation, &f.Warnings, &firstSeen, &last, &lostAfter, &f.Lost, &drainedAt, &f.RunningTaskIDs)
		f.FirstSeenAt, f.LastHeartbeatAt, f.LostAfter = deref(firstSeen), deref(last), deref(lostAfter)
		if drainedAt != nil {
			f.Drained, f.DrainedAt = true, drainedAt.UTC()
		}
		return f, err
	})
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// SetDrained implements app.AgentRegistry.
func (g Agents) SetDrained(ctx context.Context, agentID string, drained bool, at time.Time) error {
	var err error
	if drained {
		_, err = g.DB.Exec(ctx, `INSERT INTO agent_drains (agent_id, drained_at) VALUES ($1, $2) ON CONFLICT (agent_id) DO NOTHING`, agentID, at)
	} else {
		_, err = g.DB.Exec(ctx, `DELETE FROM agent_drains WHERE agent_id = $1`, agentID)
	}
	if err != nil {
		return fmt.Errorf("drain %s (%v): %w", agentID, drained, err)
	}
	return nil
}

// Drained implements app.AgentRegistry.
func (g Agents) Drained(ctx context.Context, agentID string) (bool, error) {
	// Every claim asks: on its keyed plan, a lookup by key.
	var drained bool
	if err := pg.QueryKeyed(ctx, g.DB, func(rows pgx.Rows) error {
		var err error
		drained, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
		return err
	}, drainedSQL, agentID); err != nil {
		return false, fmt.Errorf("is %s drained: %w", agentID, err)
	}
	return drained, nil
}

const drainedSQL = `SELECT EXISTS (SELECT 1 FROM agent_drains WHERE agent_id = $1)`

// Machines implements app.AgentRegistry (for broadcast fan-out).
func (g Agents) Machines(ctx context.Context, tenant string, labels []string) ([]string, error) {
	rows, err := g.DB.Query(ctx, `SELECT DISTINCT machine_id FROM agents
		WHERE NOT lost AND (tenant_id = '' OR tenant_id = $1) AND labels @> $2::text[] ORDER BY machine_id`, tenant, nonNil(labels))
	if err != nil {
		return nil, fmt.Errorf("machines: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
