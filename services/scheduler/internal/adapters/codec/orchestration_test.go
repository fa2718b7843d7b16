package codec

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

func TestEveryOrchestrationEventRoundTrips(t *testing.T) {
	at := time.Date(2026, 11, 22, 12, 0, 0, 123456789, time.UTC)
	spec, err := domain.NormalizeSpec(domain.SpecInput{Name: "n", Command: "python", Args: []string{"a"}, Labels: []string{"gpu:a100"}})
	if err != nil {
		t.Fatal(err)
	}
	dag := orch.Definition{Name: "g", Mode: orch.ModeDAG, Webhook: "https://hooks.example.com/g", Members: []orch.MemberDef{
		{Key: "download", Spec: spec}, {Key: "merge", Spec: spec, DependsOn: []string{"download"}, ClusterQueue: "cq"},
		{Key: "0192a000-0000-7000-8000-000000000001", Spec: spec, TaskID: "0192a000-0000-7000-8000-000000000001"}}}
	repeat := orch.Definition{Name: "r", Mode: orch.ModeRepeat, Repeat: &orch.RepeatDef{Count: 20, Parallel: 5, IntervalSec: 1,
		MaxFailures: 3, BackoffSec: 30, Threshold: 3, Spec: spec, ClusterQueue: "cq"}}
	tpl := orch.Template{ID: "train", TenantID: "t", Name: "Train", Description: "d", Command: "python", Args: []string{"{{m}}"},
		Workdir: "/w", Env: map[string]string{"K": "{{m}}"}, Timeout: 60, Priority: 3, Category: "ml", Tags: []string{"gpu"},
		Variables: []orch.Var{{Name: "m", Type: orch.VarSelect, Required: true, Default: "a", Description: "model", Options: []string{"a", "b"}}},
		CreatedBy: "key-1", CreatedAt: at}
	events := []struct {
		aggregate string
		event     orch.Event
	}{
		{"group-1", orch.Created{ID: "group-1", TenantID: "t", CreatedBy: "key-1", RequestID: "req", Def: dag}},
		{"group-1", orch.Created{ID: "group-1", TenantID: "t", CreatedBy: "key-1", Def: repeat}},
		{"group-1", orch.Started{}},
		{"group-1", orch.Released{Members: []orch.Release{{Key: "run-1", TaskID: "task-1", Run: 1, Attempt: 2}, {Key: "b", TaskID: "task-2"}}}},
		{"group-1", orch.Changed{Members: []orch.Change{{Key: "a", TaskID: "task-1", From: domain.StatusPending, To: domain.StatusFailed,
			StartedAt: at, EndedAt: at, Error: "exit code 1"}, {Key: "b", TaskID: "task-2", From: domain.StatusPending, To: domain.StatusRunning, StartedAt: at}}}},
		{"group-1", orch.Completed{}},
		{"group-1", orch.Failed{Reason: "task b failed", Members: []string{"b"}}},
		{"group-1", orch.Canceled{Reason: "not needed"}},
		{"group-1", orch.Deleted{}},
		{"group-1", orch.CircuitOpened{ConsecutiveFailures: 3, Failures: 4}},
		{"group-1", orch.RepeatReset{Operator: "ops", Reason: "fixed"}},
		{"template/t/train", orch.TemplateCreated{Template: tpl}},
		{"template/t/train", orch.TemplateUpdated{Template: tpl}},
		{"template/t/train", orch.TemplateDeleted{}},
	}
	for _, e := range events {
		in := orch.Record{Event: e.event, At: at, Actor: "key-1", IP: "203.0.113.7"}
		payload, err := MarshalOrchestration("ev-1", e.aggregate, "t", 3, in, map[string]string{"traceparent": "00-x"})
		if err != nil {
			t.Fatalf("%T: %v", e.event, err)
		}
		env, out, err := UnmarshalOrchestration(payload)
		if err != nil {
			t.Fatalf("%T: %v", e.event, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("%T round trip:\n in  %+v\n out %+v", e.event, in, out)
		}
		if env.GetVersion() != 3 || env.GetAggregateId() != e.aggregate || env.GetTraceContext()["traceparent"] != "00-x" {
			t.Errorf("%T envelope = %v", e.event, env)
		}
	}
}

// Every case of the OrchestrationEvent oneof decodes to an event one of
// the folds (groups, templates) has a case for, and encodes back to the
// same case: an event added to the proto fails here until it has both.
func TestEveryOrchestrationCaseDecodesAndFolds(t *testing.T) {
	desc := (&taskv1.OrchestrationEvent{}).ProtoReflect().Descriptor()
	fields := desc.Oneofs().ByName("event").Fields()
	if fields.Len() == 0 {
		t.Fatal("OrchestrationEvent has no event cases")
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &taskv1.OrchestrationEvent{EventId: "e", AggregateId: "group-1", Version: 2, TenantId: "t"}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		r, err := OrchestrationRecord(env)
		if err != nil {
			t.Errorf("%s: %v", fd.Name(), err)
			continue
		}
		_, template := orch.ApplyTemplate(orch.Template{}, r)
		if !orch.Handles(r.Event) && !template {
			t.Errorf("%s: no fold has a case for %s", fd.Name(), r.Event.EventName())
		}
		back, err := OrchestrationEnvelope("e", "group-1", "t", 2, r, nil)
		if err != nil {
			t.Errorf("%s: %v", fd.Name(), err)
			continue
		}
		if got := orchestrationCase(back); got != string(fd.Name()) {
			t.Errorf("%s encodes back as %s", fd.Name(), got)
		}
	}
	if _, err := OrchestrationRecord(&taskv1.OrchestrationEvent{}); err == nil {
		t.Error("an envelope without an event decoded")
	}
}
