package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// Agents is app.AgentRegistry over the agents table: operational state
// that heartbeats overwrite, not events.
type Agents struct{ DB *pgxpool.Pool }

// Heartbeat implements app.AgentRegistry.
func (g Agents) Heartbeat(ctx context.Context, a app.Agent) error {
	_, err := g.DB.Exec(ctx, `
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

// Machines implements app.AgentRegistry (for broadcast fan-out).
func (g Agents) Machines(ctx context.Context, tenant string, labels []string) ([]string, error) {
	rows, err := g.DB.Query(ctx, `SELECT DISTINCT machine_id FROM agents
		WHERE NOT lost AND (tenant_id = '' OR tenant_id = $1) AND labels @> $2::text[] ORDER BY machine_id`, tenant, nonNil(labels))
	if err != nil {
		return nil, fmt.Errorf("machines: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
