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
	d, err := ConvertOrchestration(&taskv1.OrchestrationEvent{EventId: "ev-1", AggregateId: "g-1", TenantId: "acme",
		OccurredAt: timestamppb.New(at), Event: &taskv1.OrchestrationEvent_TaskGroupCircuitOpened{
			TaskGroupCircuitOpened: &taskv1.TaskGroupCircuitOpened{ConsecutiveFailures: 3}}})
	want := domain.Delivery{ID: "msg_ev-1", EventID: "ev-1", TenantID: "acme", TaskID: "g-1", Status: "circuit_open",
		Body: `{"task_group_id":"g-1","status":"circuit_open"}`, CreatedAt: at}
	if err != nil || d == nil || *d != want {
		t.Errorf("circuit opened = %+v, %v; want %+v", d, err, want)
	}
	if d, err := ConvertOrchestration(&taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCompleted{
		TaskGroupCompleted: &taskv1.TaskGroupCompleted{}}}); d != nil || err != nil {
		t.Errorf("a completed group alerts: %+v, %v", d, err)
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
