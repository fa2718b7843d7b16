package tasks

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

func TestConvert(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := int32(1)
	spec := &taskv1.TaskSpec{Priority: &p, Resources: map[string]string{"nvidia.com/gpu": "2", "cpu": "500m"}}
	tests := []struct {
		name      string
		ev        *taskv1.TaskEvent
		wantKind  app.FactKind
		wantOpens bool
	}{
		{"submitted with queue", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{ClusterQueue: "q", Spec: spec}}}, app.FactQueue, true},
		{"submitted without queue", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{Spec: spec}}}, "", false},
		{"updated with queue", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Updated{Updated: &taskv1.TaskUpdated{ClusterQueue: "q", Spec: spec}}}, app.FactQueue, true},
		{"updated without queue", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Updated{Updated: &taskv1.TaskUpdated{Spec: spec}}}, app.FactFinish, false},
		{"submitted held for dependencies", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{ClusterQueue: "q", Spec: spec, HeldForDependencies: true}}}, "", false},
		{"updated held for dependencies", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Updated{Updated: &taskv1.TaskUpdated{ClusterQueue: "q", Spec: spec, HeldForDependencies: true}}}, app.FactFinish, false},
		{"dependencies met", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_DependenciesMet{DependenciesMet: &taskv1.TaskDependenciesMet{ClusterQueue: "q", Spec: spec}}}, app.FactQueue, true},
		{"retry", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_RetryScheduled{RetryScheduled: &taskv1.TaskRetryScheduled{}}}, app.FactRequeue, false},
		{"requeued", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Requeued{Requeued: &taskv1.TaskRequeued{}}}, app.FactRequeue, false},
		{"preempted keeps usage", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Preempted{Preempted: &taskv1.TaskPreempted{}}}, "", false},
		{"leased", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{}}}, "", false},
		{"admitted", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Admitted{Admitted: &taskv1.TaskAdmitted{}}}, "", false},
		{"succeeded", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{}}}, app.FactFinish, false},
		{"failed", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{}}}, app.FactFinish, false},
		{"canceled", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Canceled{Canceled: &taskv1.TaskCanceled{}}}, app.FactFinish, false},
		{"checkpointed", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Checkpointed{Checkpointed: &taskv1.TaskCheckpointed{}}}, "", false},
		{"suspended", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Suspended{Suspended: &taskv1.TaskSuspended{}}}, app.FactFinish, false},
		{"lease expired, retried", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseExpired{LeaseExpired: &taskv1.TaskLeaseExpired{}}}, "", false},
		{"lease expired, failed", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseExpired{LeaseExpired: &taskv1.TaskLeaseExpired{Failed: true}}}, app.FactFinish, false},
		{"deleted", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Deleted{Deleted: &taskv1.TaskDeleted{}}}, app.FactDelete, false},
		{"expired", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Expired{Expired: &taskv1.TaskExpired{}}}, app.FactDelete, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.ev.AggregateId, tt.ev.Version, tt.ev.TenantId, tt.ev.OccurredAt = "t1", 7, "ten", timestamppb.New(at)
			f, err := Convert(tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			if f.Kind != tt.wantKind || f.Opens != tt.wantOpens {
				t.Fatalf("Convert = %+v; want kind %q opens %v", f, tt.wantKind, tt.wantOpens)
			}
			if f.Kind != "" && (f.TaskID != "t1" || f.TaskVersion != 7 || f.TenantID != "ten") {
				t.Fatalf("identity = %+v", f.Fact)
			}
			if f.Kind == app.FactQueue {
				if f.Priority != 10 || f.Requests["nvidia.com/gpu"] != 2000 || f.Requests["cpu"] != 500 || f.ClusterQueue != "q" {
					t.Fatalf("queued workload = %+v", f.Fact)
				}
				_, submitted := tt.ev.GetEvent().(*taskv1.TaskEvent_Submitted)
				_, released := tt.ev.GetEvent().(*taskv1.TaskEvent_DependenciesMet)
				if (submitted || released) != f.Created.Equal(at) {
					t.Fatalf("created = %v (a submission or a release sets it, an update does not)", f.Created)
				}
			}
		})
	}
}

func TestPriority(t *testing.T) {
	for task, want := range map[int32]int{1: 10, 5: 6, 10: 1} {
		if got := Priority(task); got != want {
			t.Errorf("Priority(%d) = %d, want %d", task, got, want)
		}
	}
}

// An event without a case is reported, not taken for one that means
// nothing.
func TestConvertReportsAnEventWithoutACase(t *testing.T) {
	if _, err := Convert(&taskv1.TaskEvent{AggregateId: "t1", Version: 3}); !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("err = %v, want ErrUnknownEvent", err)
	}
}

// Convert has a case for every task event.
func TestLifecycleCoverage(t *testing.T) {
	lifecycletest.EveryEvent(t, "the admission workload facts (tasks.Convert)", func(ev *taskv1.TaskEvent) error {
		_, err := Convert(ev)
		return err
	})
}
