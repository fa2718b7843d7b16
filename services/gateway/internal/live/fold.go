package live

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// Task statuses of the task API (ARCHITECTURE §4.1, seed 004 §2.3).
const (
	StatusPending   = "pending"
	StatusAssigned  = "assigned"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	StatusPreempted = "preempted"
	StatusSuspended = "suspended"
)

// Final reports whether a task in status makes no further transition on
// its own. A failed attempt with retries left is followed by a retry in the
// same commit, so a stream confirms "failed" with the scheduler before it
// ends (see stream.confirmFinal).
func Final(status string) bool {
	return status == StatusCompleted || status == StatusFailed || status == StatusCancelled
}

// apply folds one event into t, the task as of the previous version, and
// reports whether the event deleted the task. It moves the fields a live
// frame shows — status, progress, the attempt, retry count, outcome and
// timestamps — the way the scheduler's own fold moves them, so a stream
// that started from a GetTask snapshot stays equal to what GetTask would
// answer at each version (the gateway's live tests compare the two). Spec
// fields are left as the snapshot had them: events that change the spec
// are not pushed.
func apply(t *taskv1.Task, ev *taskv1.TaskEvent) (deleted bool) {
	at := ev.GetOccurredAt()
	t.Version = int32(ev.GetVersion())
	t.UpdatedAt = at
	switch e := ev.GetEvent().(type) {
	case *taskv1.TaskEvent_Submitted:
		t.Id, t.Status, t.CreatedAt = ev.GetAggregateId(), StatusPending, at
	case *taskv1.TaskEvent_Admitted:
		t.Queue = e.Admitted.GetQueue()
	case *taskv1.TaskEvent_Leased:
		clearAttempt(t)
		l := e.Leased
		t.Status, t.AttemptId, t.AssignedAgentId = StatusAssigned, l.GetAttemptId(), l.GetAgentId()
		t.AssignedAt, t.LeaseExpiresAt, t.LastHeartbeatAt = at, l.GetLeaseExpiresAt(), at
	case *taskv1.TaskEvent_Started:
		t.Status, t.StartedAt, t.LeaseExpiresAt, t.LastHeartbeatAt = StatusRunning, at, e.Started.GetLeaseExpiresAt(), at
	case *taskv1.TaskEvent_Progressed:
		t.Progress, t.ProgressMessage, t.LastHeartbeatAt = e.Progressed.GetProgress(), e.Progressed.GetMessage(), at
	case *taskv1.TaskEvent_LeaseRenewed:
		t.LeaseExpiresAt, t.LastHeartbeatAt = e.LeaseRenewed.GetLeaseExpiresAt(), at
	case *taskv1.TaskEvent_Succeeded:
		s := e.Succeeded
		code := s.GetExitCode()
		t.Status, t.ExitCode, t.EndedAt, t.Error, t.Progress = StatusCompleted, &code, s.GetEndedAt(), "", 100
		if t.StartedAt == nil {
			t.StartedAt = s.GetEndedAt()
		}
		t.LeaseExpiresAt = nil
	case *taskv1.TaskEvent_Failed:
		f := e.Failed
		t.Status, t.ExitCode, t.Error, t.EndedAt, t.LeaseExpiresAt = StatusFailed, f.ExitCode, f.GetError(), f.GetEndedAt(), nil
	case *taskv1.TaskEvent_RetryScheduled:
		r := e.RetryScheduled
		t.Status, t.RetryCount, t.RetryAt = StatusPending, r.GetRetryCount(), r.GetRetryAt()
		t.AssignedAgentId, t.LeaseExpiresAt = "", nil
	case *taskv1.TaskEvent_LeaseExpired:
		x := e.LeaseExpired
		t.RetryCount, t.LeaseExpiresAt = x.GetRetryCount(), nil
		if x.GetFailed() {
			t.Status, t.EndedAt, t.Error = StatusFailed, at, "lease expired: "+x.GetReason()
		} else {
			clearAttempt(t)
			t.Status, t.RetryAt = StatusPending, at
		}
	case *taskv1.TaskEvent_Preempted:
		t.Status, t.LeaseExpiresAt = StatusPreempted, nil
	case *taskv1.TaskEvent_Suspended:
		t.Status, t.LeaseExpiresAt = StatusSuspended, nil
	case *taskv1.TaskEvent_Requeued:
		clearAttempt(t)
		t.Status, t.RetryAt = StatusPending, at
	case *taskv1.TaskEvent_Canceled:
		t.Status, t.EndedAt, t.LeaseExpiresAt = StatusCancelled, at, nil
		if r := e.Canceled.GetReason(); r != "" {
			t.Error = "cancelled: " + r
		}
	case *taskv1.TaskEvent_Deleted, *taskv1.TaskEvent_Expired:
		return true
	}
	return false
}

// clearAttempt forgets the current attempt before a new one or a requeue.
func clearAttempt(t *taskv1.Task) {
	t.AttemptId, t.AssignedAgentId = "", ""
	t.AssignedAt, t.StartedAt, t.EndedAt, t.LeaseExpiresAt = nil, nil, nil, nil
	t.ExitCode, t.Error, t.Stdout, t.Stderr = nil, "", "", ""
	t.Progress, t.ProgressMessage = 0, ""
}

// timeOf returns ts for JSON as the task API writes timestamps (RFC 3339
// in UTC with 0, 3, 6 or 9 fractional digits, like protojson), nil when
// unset.
func timeOf(ts *timestamppb.Timestamp) *string {
	if ts == nil {
		return nil
	}
	t := ts.AsTime().UTC()
	layout := "2006-01-02T15:04:05.000000000Z"
	switch n := t.Nanosecond(); {
	case n == 0:
		layout = "2006-01-02T15:04:05Z"
	case n%1e6 == 0:
		layout = "2006-01-02T15:04:05.000Z"
	case n%1e3 == 0:
		layout = "2006-01-02T15:04:05.000000Z"
	}
	s := t.Format(layout)
	return &s
}
