package views

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// ErrNoAuditCase is returned by ConvertAudit for an event it has no case
// for: every task event must name its audit action.
var ErrNoAuditCase = errors.New("audit: no case for the event")

// AuditRow is the operation on audit_logs: insert this row unless its id
// (the event id) is there already.
type AuditRow struct {
	ID       string // the event id
	At       time.Time
	TenantID string
	Action   string // task.created, task.assigned, …, template.created, …
	// Resource is what the row is about: task (the default when empty),
	// task_group or template; ResourceID its id.
	Resource   string
	ResourceID string
	UserID     string // the event's actor
	MachineID  string
	Details    []byte // a JSON object
}

// ConvertAudit makes one audit row per event. Details are JSON objects,
// marshalled with sorted keys, so the same event always gives the same
// row.
func ConvertAudit(events []Event) ([]AuditRow, error) {
	rows := make([]AuditRow, len(events))
	for i, e := range events {
		action, detail, machine, ok := describe(e.Record)
		if !ok {
			return nil, fmt.Errorf("%w: %s (task %s v%d)", ErrNoAuditCase, e.Record.Event.EventName(),
				e.Envelope.GetAggregateId(), e.Envelope.GetVersion())
		}
		d, err := json.Marshal(detail)
		if err != nil {
			return nil, fmt.Errorf("audit: details of %s: %w", action, err)
		}
		env := e.Envelope
		rows[i] = AuditRow{ID: env.GetEventId(), At: e.Record.At, TenantID: env.GetTenantId(), Action: action,
			Resource: "task", ResourceID: env.GetAggregateId(), UserID: env.GetActor(), MachineID: machine, Details: d}
	}
	return rows, nil
}

// describe names the audit action (the task API's audit log spells the
// common ones) and the details worth keeping; ok is false for an event it
// has no case for.
func describe(r domain.Record) (action string, details map[string]any, machine string, ok bool) {
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
		action, details["reason"] = "task.suspended", e.Reason
	case domain.Checkpointed:
		action, details["attempt_id"], details["checkpoint"], details["size_bytes"] = "task.checkpointed", e.AttemptID, e.Key, e.SizeBytes
	case domain.Requeued:
		action, details["from"] = "task.requeued", e.From
	case domain.Canceled:
		action, details["reason"] = "task.cancelled", e.Reason
	case domain.Deleted:
		action = "task.deleted"
	case domain.Expired:
		action = "task.expired"
	default:
		return "", nil, "", false
	}
	return action, details, machine, true
}

// AuditStore writes audit_logs rows (Table).
type AuditStore struct{ Table string }

// Store inserts rows in one statement. The event id is the row's key, so a
// row stored before (a replay, a redelivery) is left as it is.
func (s AuditStore) Store(ctx context.Context, tx pgx.Tx, rows []AuditRow) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	ids, tenants, actions, users, machines := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	resources, resourceIDs := make([]string, n), make([]string, n)
	times := make([]any, n)
	details := make([][]byte, n)
	for i, r := range rows {
		ids[i], tenants[i], actions[i], users[i], machines[i] = r.ID, r.TenantID, r.Action, r.UserID, r.MachineID
		resources[i], resourceIDs[i], times[i], details[i] = r.Resource, r.ResourceID, r.At, r.Details
		if resources[i] == "" {
			resources[i] = "task"
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{s.Table}.Sanitize()+`
		(id, timestamp, tenant_id, action, resource, resource_id, user_id, machine_id, details)
		SELECT i, ts, tn, ac, rs, ri, us, ma, de FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[],
			$5::text[], $6::text[], $7::text[], $8::json[], $9::text[]) AS x(i, ts, tn, ac, ri, us, ma, de, rs)
		ON CONFLICT (id) DO NOTHING`, ids, times, tenants, actions, resourceIDs, users, machines, details, resources)
	if err != nil {
		return fmt.Errorf("audit: write: %w", err)
	}
	return nil
}
