package views

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

func orchEvent(t *testing.T, aggregate, actor string, v int64, e orch.Event) OrchestrationEvent {
	t.Helper()
	rec := orch.Record{Event: e, At: t0, Actor: actor}
	env, err := codec.OrchestrationEnvelope("ev-"+aggregate, aggregate, "tenant-a", v, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return OrchestrationEvent{Envelope: env, Record: rec}
}

func TestConvertOrchestrationAudit(t *testing.T) {
	tests := []struct {
		name     string
		event    OrchestrationEvent
		action   string // "" = no row
		resource string
		id, user string
		details  string
	}{
		{"group created", orchEvent(t, "g1", "key-1", 1, orch.Created{Def: orch.Definition{Name: "etl", Mode: orch.ModeDAG,
			Members: make([]orch.MemberDef, 4)}}), "task_group.created", "task_group", "g1", "key-1", `{"mode":"dag","name":"etl","tasks":4}`},
		{"released", orchEvent(t, "g1", "scheduler", 2, orch.Released{}), "", "", "", "", ""},
		{"changed", orchEvent(t, "g1", "scheduler", 3, orch.Changed{}), "", "", "", "", ""},
		{"failed", orchEvent(t, "g1", "scheduler", 4, orch.Failed{Reason: "task b failed", Members: []string{"b"}}),
			"task_group.failed", "task_group", "g1", "scheduler", `{"members":["b"],"reason":"task b failed"}`},
		{"breaker opened", orchEvent(t, "g1", "scheduler", 5, orch.CircuitOpened{ConsecutiveFailures: 3, Failures: 3}),
			"task_group.circuit_opened", "task_group", "g1", "scheduler", `{"consecutive_failures":3,"failures":3}`},
		{"breaker reset", orchEvent(t, "g1", "admin:ops", 6, orch.RepeatReset{Operator: "admin:ops", Reason: "rig fixed"}),
			"task_group.repeat_reset", "task_group", "g1", "admin:ops", `{"operator":"admin:ops","reason":"rig fixed"}`},
		{"template created", orchEvent(t, "template/tenant-a/train", "key-1", 1, orch.TemplateCreated{Template: orch.Template{ID: "train", Name: "Train"}}),
			"template.created", "template", "train", "key-1", `{"name":"Train"}`},
		{"template updated", orchEvent(t, "template/tenant-a/train", "key-2", 2, orch.TemplateUpdated{Template: orch.Template{ID: "train", Name: "T2"}}),
			"template.updated", "template", "train", "key-2", `{"name":"T2"}`},
		{"template deleted", orchEvent(t, "template/tenant-a/train", "key-2", 3, orch.TemplateDeleted{}),
			"template.deleted", "template", "train", "key-2", `{}`},
	}
	for _, tt := range tests {
		rows, err := ConvertOrchestrationAudit([]OrchestrationEvent{tt.event})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if tt.action == "" {
			if len(rows) != 0 {
				t.Errorf("%s: rows %+v, want none", tt.name, rows)
			}
			continue
		}
		if len(rows) != 1 {
			t.Fatalf("%s: %d rows", tt.name, len(rows))
		}
		r := rows[0]
		if r.Action != tt.action || r.Resource != tt.resource || r.ResourceID != tt.id || r.UserID != tt.user ||
			string(r.Details) != tt.details || !r.At.Equal(t0) || r.TenantID != "tenant-a" || r.ID != tt.event.Envelope.GetEventId() {
			t.Errorf("%s: row %+v details %s", tt.name, r, r.Details)
		}
	}
}

// Every case of the OrchestrationEvent oneof has an audit case (a row or a
// deliberate none).
func TestOrchestrationAuditCoverage(t *testing.T) {
	fields := (&taskv1.OrchestrationEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event").Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &taskv1.OrchestrationEvent{EventId: "e", AggregateId: "g", Version: 1, TenantId: "t"}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		r, err := codec.OrchestrationRecord(env)
		if err != nil {
			t.Fatalf("%s: %v", fd.Name(), err)
		}
		if _, err := ConvertOrchestrationAudit([]OrchestrationEvent{{Envelope: env, Record: r}}); err != nil {
			t.Errorf("%s: %v", fd.Name(), err)
		}
	}
}
