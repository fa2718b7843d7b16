package views

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// OrchestrationEvent is one record of the orchestration topic (task groups
// and templates), decoded.
type OrchestrationEvent struct {
	Envelope *taskv1.OrchestrationEvent
	Record   orch.Record
}

// DecodeOrchestration decodes a batch of orchestration-topic records; like
// Decode, a record it cannot read fails the batch.
func DecodeOrchestration(records []*kgo.Record) ([]OrchestrationEvent, error) {
	out := make([]OrchestrationEvent, len(records))
	for i, rec := range records {
		env, r, err := codec.UnmarshalOrchestration(rec.Value)
		if err != nil {
			return nil, fmt.Errorf("orchestration event at %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		out[i] = OrchestrationEvent{Envelope: env, Record: r}
	}
	return out, nil
}

// ErrNoOrchestrationAuditCase is returned by ConvertOrchestrationAudit for
// an event it has no case for.
var ErrNoOrchestrationAuditCase = errors.New("audit: no case for the orchestration event")

// Audit resources of orchestration events.
const (
	ResourceTaskGroup = "task_group"
	ResourceTemplate  = "template"
)

// ConvertOrchestrationAudit makes the audit rows of group and template
// events: one per event, except a group's member releases and member
// status changes, which the members' own task events already audit.
// Templates are audited as the task API's audit log spells it
// (template.created, template.updated, template.deleted); a repeat's
// breaker reset keeps the operator and the reason.
func ConvertOrchestrationAudit(events []OrchestrationEvent) ([]AuditRow, error) {
	rows := make([]AuditRow, 0, len(events))
	for _, e := range events {
		action, resource, id, details, ok := describeOrchestration(e)
		if !ok {
			return nil, fmt.Errorf("%w: %s (%s v%d)", ErrNoOrchestrationAuditCase, e.Record.Event.EventName(),
				e.Envelope.GetAggregateId(), e.Envelope.GetVersion())
		}
		if action == "" {
			continue
		}
		d, err := json.Marshal(details)
		if err != nil {
			return nil, fmt.Errorf("audit: details of %s: %w", action, err)
		}
		env := e.Envelope
		rows = append(rows, AuditRow{ID: env.GetEventId(), At: e.Record.At, TenantID: env.GetTenantId(), Action: action,
			Resource: resource, ResourceID: id, UserID: env.GetActor(), Details: d})
	}
	return rows, nil
}

// describeOrchestration names an event's audit action ("" = no row),
// resource, resource id and details; ok is false for an event it has no
// case for.
func describeOrchestration(e OrchestrationEvent) (action, resource, id string, details map[string]any, ok bool) {
	details = map[string]any{}
	resource, id = ResourceTaskGroup, e.Envelope.GetAggregateId()
	switch ev := e.Record.Event.(type) {
	case orch.Created:
		action = "task_group.created"
		details["name"], details["mode"], details["tasks"] = ev.Def.Name, ev.Def.Mode, len(ev.Def.Members)
		if ev.Def.Repeat != nil {
			details["count"] = ev.Def.Repeat.Count
		}
	case orch.Started:
		action = "task_group.started"
	case orch.Released, orch.Changed:
		// Audited by the members' own task events.
	case orch.Completed:
		action = "task_group.completed"
	case orch.Failed:
		action, details["reason"], details["members"] = "task_group.failed", ev.Reason, ev.Members
	case orch.Canceled:
		action, details["reason"] = "task_group.cancelled", ev.Reason
	case orch.Deleted:
		action = "task_group.deleted"
	case orch.CircuitOpened:
		action = "task_group.circuit_opened"
		details["consecutive_failures"], details["failures"] = ev.ConsecutiveFailures, ev.Failures
	case orch.RepeatReset:
		action, details["operator"], details["reason"] = "task_group.repeat_reset", ev.Operator, ev.Reason
	case orch.TemplateCreated:
		resource, id, action, details["name"] = ResourceTemplate, ev.Template.ID, "template.created", ev.Template.Name
	case orch.TemplateUpdated:
		resource, id, action, details["name"] = ResourceTemplate, ev.Template.ID, "template.updated", ev.Template.Name
	case orch.TemplateDeleted:
		resource, action = ResourceTemplate, "template.deleted"
		id = templateIDOf(e.Envelope)
	default:
		return "", "", "", nil, false
	}
	return action, resource, id, details, true
}

// templateIDOf is the template id of a template aggregate
// ("template/<tenant>/<id>").
func templateIDOf(env *taskv1.OrchestrationEvent) string {
	prefix := orch.TemplateAggregateID(env.GetTenantId(), "")
	id := env.GetAggregateId()
	if len(id) > len(prefix) && id[:len(prefix)] == prefix {
		return id[len(prefix):]
	}
	return id
}
