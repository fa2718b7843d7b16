package live

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// apply moves the live fields the way the scheduler's fold does.
func TestApply(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC))
	ev := func(e *taskv1.TaskEvent) *taskv1.TaskEvent {
		e.AggregateId, e.Version, e.OccurredAt = "t1", 7, at
		return e
	}
	running := func() *taskv1.Task {
		return &taskv1.Task{Id: "t1", Version: 6, Status: StatusRunning, AttemptId: "a1", AssignedAgentId: "agent-1",
			Progress: 40, ProgressMessage: "half", StartedAt: at, AssignedAt: at, LeaseExpiresAt: at, MaxRetries: 3}
	}
	code := int32(2)
	tests := []struct {
		name    string
		event   *taskv1.TaskEvent
		deleted bool
		check   func(*taskv1.Task) bool
	}{
		{"lease expired with a retry", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseExpired{LeaseExpired: &taskv1.TaskLeaseExpired{RetryCount: 1}}}, false,
			func(t *taskv1.Task) bool {
				return t.Status == StatusPending && t.RetryCount == 1 && t.AttemptId == "" && t.Progress == 0 && t.RetryAt != nil
			}},
		{"lease expired for good", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseExpired{LeaseExpired: &taskv1.TaskLeaseExpired{Failed: true, Reason: "agent lost"}}}, false,
			func(t *taskv1.Task) bool {
				return t.Status == StatusFailed && t.GetError() == "lease expired: agent lost" && t.EndedAt != nil && t.AttemptId == "a1"
			}},
		{"failed", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{ExitCode: &code, Error: "exit 2", EndedAt: at}}}, false,
			func(t *taskv1.Task) bool {
				return t.Status == StatusFailed && t.GetExitCode() == 2 && t.GetError() == "exit 2" && t.LeaseExpiresAt == nil
			}},
		{"preempted", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Preempted{Preempted: &taskv1.TaskPreempted{}}}, false,
			func(t *taskv1.Task) bool { return t.Status == StatusPreempted && t.AttemptId == "a1" }},
		{"suspended", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Suspended{Suspended: &taskv1.TaskSuspended{}}}, false,
			func(t *taskv1.Task) bool { return t.Status == StatusSuspended }},
		{"requeued", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Requeued{Requeued: &taskv1.TaskRequeued{}}}, false,
			func(t *taskv1.Task) bool { return t.Status == StatusPending && t.AttemptId == "" && t.StartedAt == nil }},
		{"cancelled", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Canceled{Canceled: &taskv1.TaskCanceled{Reason: "not needed"}}}, false,
			func(t *taskv1.Task) bool {
				return t.Status == StatusCancelled && t.GetError() == "cancelled: not needed" && t.EndedAt != nil
			}},
		{"succeeded", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{EndedAt: at}}}, false,
			func(t *taskv1.Task) bool {
				return t.Status == StatusCompleted && t.Progress == 100 && t.GetExitCode() == 0
			}},
		{"renewed", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseRenewed{LeaseRenewed: &taskv1.TaskLeaseRenewed{}}}, false,
			func(t *taskv1.Task) bool { return t.Status == StatusRunning && t.LastHeartbeatAt != nil }},
		{"expired", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Expired{Expired: &taskv1.TaskExpired{}}}, true,
			func(t *taskv1.Task) bool { return t.Status == StatusRunning }},
	}
	for _, tt := range tests {
		task := running()
		deleted := apply(task, ev(tt.event))
		if deleted != tt.deleted || task.Version != 7 || !task.UpdatedAt.AsTime().Equal(at.AsTime()) || !tt.check(task) {
			t.Errorf("%s: deleted %v, task %v", tt.name, deleted, task)
		}
	}
}

func TestFinal(t *testing.T) {
	for status, want := range map[string]bool{StatusPending: false, StatusAssigned: false, StatusRunning: false,
		StatusPreempted: false, StatusSuspended: false, StatusCompleted: true, StatusFailed: true, StatusCancelled: true} {
		if Final(status) != want {
			t.Errorf("Final(%s) = %v", status, !want)
		}
	}
}

// Timestamps are written like protojson writes them.
func TestTimeOf(t *testing.T) {
	base := time.Date(2026, 2, 5, 12, 0, 0, 0, time.FixedZone("x", 3600))
	tests := []struct {
		t    time.Time
		want string
	}{
		{base, "2026-02-05T11:00:00Z"},
		{base.Add(120 * time.Millisecond), "2026-02-05T11:00:00.120Z"},
		{base.Add(123456 * time.Nanosecond), "2026-02-05T11:00:00.000123456Z"},
		{base.Add(123 * time.Microsecond), "2026-02-05T11:00:00.000123Z"},
	}
	for _, tt := range tests {
		if got := timeOf(timestamppb.New(tt.t)); got == nil || *got != tt.want {
			t.Errorf("timeOf(%v) = %v, want %s", tt.t, got, tt.want)
		}
	}
	if timeOf(nil) != nil {
		t.Error("timeOf(nil) is not nil")
	}
}

func TestResumePoint(t *testing.T) {
	tests := []struct {
		header, query string
		want          int64
		err           string
	}{
		{"", "", 0, ""},
		{"5", "", 5, ""},
		{"", "7", 7, ""},
		{"9", "4", 9, ""}, // the larger wins
		{"x", "", 0, "Last-Event-ID"},
		{"", "-1", 0, "after_version"},
		{"", "1.5", 0, "after_version"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/x?after_version="+tt.query, nil)
		if tt.header != "" {
			r.Header.Set("Last-Event-ID", tt.header)
		}
		got, err := resumePoint(r)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("header %q query %q: %d, %v", tt.header, tt.query, got, err)
		}
	}
}

func TestCloseStatus(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		reason end
		err    error
		code   websocket.StatusCode
	}{
		{endFinal, nil, websocket.StatusNormalClosure},
		{endSlow, nil, websocket.StatusPolicyViolation},
		{endSlow, ErrSlowConsumer, websocket.StatusPolicyViolation},
		{endIdle, nil, websocket.StatusGoingAway},
		{endShutdown, nil, websocket.StatusGoingAway},
		{endClient, nil, websocket.StatusInternalError},
		{endSlow, errString(long), websocket.StatusPolicyViolation},
	}
	for _, tt := range tests {
		code, text := closeStatus(tt.reason, tt.err)
		if code != tt.code || text == "" || len(text) > 123 {
			t.Errorf("closeStatus(%s, %v) = %v %q", tt.reason, tt.err, code, text)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestChangeName(t *testing.T) {
	if got := ChangeName(nil); got != "snapshot" {
		t.Errorf("nil: %s", got)
	}
	if got := ChangeName(&taskv1.TaskEvent{}); got != "unknown" {
		t.Errorf("no event: %s", got)
	}
	if got := ChangeName(leased("a")); got != "leased" {
		t.Errorf("leased: %s", got)
	}
}
