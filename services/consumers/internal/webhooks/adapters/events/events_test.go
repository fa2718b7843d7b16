package events

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

func TestConvert(t *testing.T) {
	tests := []struct {
		ev     *taskv1.TaskEvent
		kind   domain.EventKind
		status string
		url    string
	}{
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{Spec: &taskv1.TaskSpec{Webhook: &taskv1.Webhook{Url: "https://h/x"}}}}}, domain.Spec, "", "https://h/x"},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Updated{Updated: &taskv1.TaskUpdated{Spec: &taskv1.TaskSpec{}}}}, domain.Spec, "", ""},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{}}}, domain.Final, "completed", ""},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{RetryFollows: true}}}, domain.Ignored, "", ""},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{}}}, domain.Final, "failed", ""},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseExpired{LeaseExpired: &taskv1.TaskLeaseExpired{}}}, domain.Ignored, "", ""},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseExpired{LeaseExpired: &taskv1.TaskLeaseExpired{Failed: true}}}, domain.Final, "failed", ""},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Canceled{Canceled: &taskv1.TaskCanceled{}}}, domain.Final, "cancelled", ""},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Preempted{Preempted: &taskv1.TaskPreempted{}}}, domain.Ignored, "", ""},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Checkpointed{Checkpointed: &taskv1.TaskCheckpointed{}}}, domain.Ignored, "", ""},
	}
	for _, tt := range tests {
		tt.ev.EventId, tt.ev.AggregateId, tt.ev.Version = "ev", "t", 2
		e, err := Convert(tt.ev)
		if err != nil || e.Kind != tt.kind || e.Status != tt.status || e.URL != tt.url {
			t.Errorf("%T = %+v, %v", tt.ev.GetEvent(), e, err)
		}
	}
}

func TestLifecycleCoverage(t *testing.T) {
	lifecycletest.EveryEvent(t, "webhook notifications (events.Convert)", func(ev *taskv1.TaskEvent) error {
		_, err := Convert(ev)
		return err
	})
}

func TestConvertOrchestration(t *testing.T) {
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	env := func(e any) *taskv1.OrchestrationEvent {
		ev := &taskv1.OrchestrationEvent{EventId: "ev-1", AggregateId: "g-1", TenantId: "acme", OccurredAt: timestamppb.New(at)}
		switch x := e.(type) {
		case *taskv1.OrchestrationEvent_TaskGroupCircuitOpened:
			ev.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupCreated:
			ev.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupCompleted:
			ev.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupFailed:
			ev.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupCanceled:
			ev.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupDeleted:
			ev.Event = x
		case *taskv1.OrchestrationEvent_TaskGroupMembersChanged:
			ev.Event = x
		}
		return ev
	}
	base := domain.GroupEvent{EventID: "ev-1", GroupID: "g-1", TenantID: "acme", At: at}
	with := func(k domain.EventKind, url, status string) domain.GroupEvent {
		e := base
		e.Kind, e.URL, e.Status = k, url, status
		return e
	}
	for name, tt := range map[string]struct {
		in   *taskv1.OrchestrationEvent
		want domain.GroupEvent
	}{
		"created": {env(&taskv1.OrchestrationEvent_TaskGroupCreated{TaskGroupCreated: &taskv1.TaskGroupCreated{
			WebhookUrl: "https://example.com/g"}}), with(domain.Spec, "https://example.com/g", "")},
		"completed": {env(&taskv1.OrchestrationEvent_TaskGroupCompleted{TaskGroupCompleted: &taskv1.TaskGroupCompleted{}}),
			with(domain.Final, "", "completed")},
		"failed": {env(&taskv1.OrchestrationEvent_TaskGroupFailed{TaskGroupFailed: &taskv1.TaskGroupFailed{Reason: "x"}}),
			with(domain.Final, "", "failed")},
		"canceled": {env(&taskv1.OrchestrationEvent_TaskGroupCanceled{TaskGroupCanceled: &taskv1.TaskGroupCanceled{}}),
			with(domain.Final, "", "cancelled")},
		"circuit opened": {env(&taskv1.OrchestrationEvent_TaskGroupCircuitOpened{TaskGroupCircuitOpened: &taskv1.TaskGroupCircuitOpened{
			ConsecutiveFailures: 3}}), with(domain.Alert, "", "")},
		"deleted": {env(&taskv1.OrchestrationEvent_TaskGroupDeleted{TaskGroupDeleted: &taskv1.TaskGroupDeleted{}}),
			with(domain.Gone, "", "")},
		"members changed": {env(&taskv1.OrchestrationEvent_TaskGroupMembersChanged{
			TaskGroupMembersChanged: &taskv1.TaskGroupMembersChanged{}}), with(domain.Ignored, "", "")},
	} {
		got, err := ConvertOrchestration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("%s = %+v, %v; want %+v", name, got, err, tt.want)
		}
	}
	if _, err := ConvertOrchestration(&taskv1.OrchestrationEvent{EventId: "ev-x"}); !errors.Is(err, ErrNoCase) {
		t.Errorf("an envelope without an event: %v", err)
	}
}

// Every orchestration event has a case.
func TestOrchestrationEventCoverage(t *testing.T) {
	fields := (&taskv1.OrchestrationEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event").Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &taskv1.OrchestrationEvent{EventId: "ev", AggregateId: "g"}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		if _, err := ConvertOrchestration(env); err != nil {
			t.Errorf("webhooks have no case for orchestration event %q: %v", fd.Name(), err)
		}
	}
}
