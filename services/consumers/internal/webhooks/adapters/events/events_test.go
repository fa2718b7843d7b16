package events

import (
	"testing"

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
