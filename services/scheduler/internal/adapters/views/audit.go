package views

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// AuditLogs projects every task event into an audit row (seed 004 §10.6).
// The event id is the row id, so a repeated event inserts nothing.
type AuditLogs struct{ Table string }

// Apply writes one audit row per record.
func (a AuditLogs) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	n := len(records)
	ids, tenants, actions, users, machines := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	resIDs := make([]string, 0, n)
	times := make([]any, 0, n)
	details := make([][]byte, 0, n)
	for _, rec := range records {
		env, r, err := codec.Unmarshal(rec.Value)
		if err != nil {
			return fmt.Errorf("audit: record %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		action, detail, machine := describe(r)
		d, err := json.Marshal(detail)
		if err != nil {
			return err
		}
		ids, tenants, actions = append(ids, env.GetEventId()), append(tenants, env.GetTenantId()), append(actions, action)
		users, machines, resIDs = append(users, env.GetActor()), append(machines, machine), append(resIDs, env.GetAggregateId())
		times, details = append(times, r.At), append(details, d)
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{a.Table}.Sanitize()+`
		(id, timestamp, tenant_id, action, resource, resource_id, user_id, machine_id, details)
		SELECT i, ts, tn, ac, 'task', ri, us, ma, de FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[],
			$5::text[], $6::text[], $7::text[], $8::json[]) AS x(i, ts, tn, ac, ri, us, ma, de)
		ON CONFLICT (id) DO NOTHING`, ids, times, tenants, actions, resIDs, users, machines, details)
	if err != nil {
		return fmt.Errorf("audit: write: %w", err)
	}
	return nil
}

// describe names the audit action (seed 004 §10.6 spells the common ones)
// and the details worth keeping.
func describe(r domain.Record) (action string, details map[string]any, machine string) {
	details = map[string]any{}
	switch e := r.Event.(type) {
	case domain.Submitted:
		action = "task.created"
		details["name"], details["type"], details["priority"] = e.Spec.Name, e.Spec.Type, e.Spec.Priority
	case domain.Updated:
		action = "task.updated"
	case domain.Admitted:
		action, details["queue"] = "task.admitted", e.Queue
	case domain.Leased:
		action, machine = "task.assigned", e.MachineID
		details["agent_id"], details["attempt_id"] = e.AgentID, e.AttemptID
	case domain.Started:
		action, details["attempt_id"] = "task.started", e.AttemptID
	case domain.Progressed:
		action, details["progress"] = "task.progress", e.Progress
	case domain.LeaseRenewed:
		action = "task.lease_renewed"
	case domain.Succeeded:
		action, details["exit_code"] = "task.completed", e.ExitCode
	case domain.Failed:
		action, details["reason"], details["error"] = "task.failed", e.Reason, e.Error
	case domain.RetryScheduled:
		action, details["retry_count"], details["manual"] = "task.retry_scheduled", e.RetryCount, e.Manual
	case domain.LeaseExpired:
		action, details["reason"], details["agent_id"] = "task.lease_expired", e.Reason, e.AgentID
	case domain.Preempted:
		action, details["preempted_by"] = "task.preempted", e.By
	case domain.Suspended:
		action = "task.suspended"
	case domain.Requeued:
		action, details["from"] = "task.requeued", e.From
	case domain.Canceled:
		action, details["reason"] = "task.cancelled", e.Reason
	case domain.Deleted:
		action = "task.deleted"
	case domain.Expired:
		action = "task.expired"
	default:
		action = "task.unknown"
	}
	return action, details, machine
}
