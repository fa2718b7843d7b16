package lifecycle

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

func snapshot() *taskv1.Task {
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	return &taskv1.Task{Id: "task-1", Name: "n", Type: "shell", Command: "echo", Status: string(StatusPending),
		Priority: 5, MaxRetries: 1, Version: 1, CreatedAt: at, UpdatedAt: at, Distribution: &taskv1.Distribution{Mode: "single"}}
}

// The fold the live streams use has a case for every task event.
func TestLifecycleCoverage(t *testing.T) {
	lifecycletest.EveryEvent(t, "the live fold (lifecycle.Apply)", func(ev *taskv1.TaskEvent) error {
		_, _, err := Apply(snapshot(), ev)
		return err
	})
}

func TestApplyFollowsTheTaskThroughItsLifecycle(t *testing.T) {
	at := func(sec int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2026, 1, 2, 3, 0, sec, 0, time.UTC))
	}
	events := []*taskv1.TaskEvent{
		{Event: &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{AttemptId: "a1", AgentId: "agent-1", MachineId: "m-1", LeaseExpiresAt: at(300)}}},
		{Event: &taskv1.TaskEvent_Started{Started: &taskv1.TaskStarted{AttemptId: "a1", LeaseExpiresAt: at(301)}}},
		{Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{AttemptId: "a1", Progress: 40, Message: "half"}}},
		{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{AttemptId: "a1", Error: "boom", EndedAt: at(4)}}},
		{Event: &taskv1.TaskEvent_RetryScheduled{RetryScheduled: &taskv1.TaskRetryScheduled{RetryCount: 1, RetryAt: at(64)}}},
		{Event: &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{AttemptId: "a2", AgentId: "agent-2", MachineId: "m-2"}}},
		{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{AttemptId: "a2", Result: &taskv1.ResultRef{Stdout: "ok"}, EndedAt: at(70)}}},
	}
	want := []string{"assigned", "running", "running", "failed", "pending", "assigned", "completed"}
	task := snapshot()
	for i, ev := range events {
		ev.AggregateId, ev.Version, ev.OccurredAt = "task-1", int64(i+2), at(i+1)
		before := proto.CloneOf(task)
		next, deleted, err := Apply(task, ev)
		if err != nil || deleted {
			t.Fatalf("event %d: deleted %v, err %v", i, deleted, err)
		}
		if !proto.Equal(task, before) {
			t.Fatalf("event %d modified its input", i)
		}
		if next.GetStatus() != want[i] || next.GetVersion() != int32(i+2) || !next.GetUpdatedAt().AsTime().Equal(at(i+1).AsTime()) {
			t.Fatalf("event %d: status %s version %d updated %v", i, next.GetStatus(), next.GetVersion(), next.GetUpdatedAt())
		}
		task = next
	}
	if task.GetAttemptId() != "a2" || task.GetMachineId() != "m-2" || task.GetProgress() != 100 || task.GetExitCode() != 0 ||
		task.ExitCode == nil || task.GetStdout() != "ok" || task.GetRetryCount() != 1 || task.GetName() != "n" || task.GetError() != "" {
		t.Errorf("final task = %v", task)
	}
}

func TestApplyReportsDeletion(t *testing.T) {
	for _, ev := range []*taskv1.TaskEvent{
		{Version: 2, Event: &taskv1.TaskEvent_Deleted{Deleted: &taskv1.TaskDeleted{}}},
		{Version: 2, Event: &taskv1.TaskEvent_Expired{Expired: &taskv1.TaskExpired{}}},
	} {
		next, deleted, err := Apply(snapshot(), ev)
		if err != nil || !deleted || next.GetStatus() != string(StatusPending) || next.GetVersion() != 2 {
			t.Errorf("%s: deleted %v err %v task %v", lifecycletest.Case(ev), deleted, err, next)
		}
	}
}

func TestApplyRefusesAnEventItDoesNotKnow(t *testing.T) {
	_, _, err := Apply(snapshot(), &taskv1.TaskEvent{AggregateId: "task-1", Version: 2})
	if !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("err = %v, want ErrUnknownEvent", err)
	}
}

func TestStatusesAreTheTaskAPIs(t *testing.T) {
	var got []string
	for _, s := range Statuses() {
		got = append(got, string(s))
	}
	want := []string{"pending", "assigned", "running", "completed", "failed", "cancelled", "preempted", "suspended"}
	if len(got) != len(want) {
		t.Fatalf("Statuses() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Statuses() = %v, want %v", got, want)
		}
	}
}
