package live

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// Update is one change of a task, handed to a View.
type Update struct {
	// Task is the task as of Version: the scheduler's GetTask answer with
	// the events since folded in by the scheduler's own fold
	// (lifecycle.Apply). A view must not modify it.
	Task *taskv1.Task
	// Version is the task's version after the change; it is the frame's
	// id, which clients resume from.
	Version int64
	// Event made the change; nil when the update is a scheduler snapshot
	// (the first frame of a stream, or a gap in the Kafka tail filled).
	Event *taskv1.TaskEvent
	// Deleted: the task was deleted or expired.
	Deleted bool
	// Final: nothing follows, the stream ends after this update.
	Final bool
}

// Frame is what a view makes of an update. Over SSE it is sent as
// "id: <version>", "event: <Event>" and "data: <Data as JSON>"; over a
// WebSocket as the text message {"id":<version>,"event":…,"data":…}.
type Frame struct {
	Event string
	// Data is marshalled with encoding/json.
	Data any
}

// View renders updates for one API: the task API's TaskView, or the video
// API's view in its own vocabulary. ok false skips an update that API does
// not show (the stream still counts it as seen). A view must render every
// update with Final or Deleted set: the stream ends after it.
type View func(u Update) (f Frame, ok bool)

// Event names of TaskView.
const (
	// EventStatus: the status changed, or the frame is a snapshot of the
	// task (the first frame of a stream carries the current status).
	EventStatus = "status"
	// EventProgress: the running attempt reported progress.
	EventProgress = "progress"
	// EventDeleted: the task was deleted or expired; the stream ends.
	EventDeleted = "deleted"
)

// TaskFrame is TaskView's data: the live fields of a task with the task
// API's names (docs/api/tasks.md#task), plus the change that produced it.
type TaskFrame struct {
	TaskID  string `json:"task_id"`
	Version int64  `json:"version"`
	// Change names the event ("leased", "started", "progressed",
	// "succeeded", … — the TaskEvent field names) or "snapshot".
	Change          string  `json:"change"`
	Status          string  `json:"status"`
	Progress        int32   `json:"progress"`
	ProgressMessage string  `json:"progress_message"`
	AttemptID       string  `json:"attempt_id"`
	AssignedAgentID string  `json:"assigned_agent_id"`
	RetryCount      int32   `json:"retry_count"`
	MaxRetries      int32   `json:"max_retries"`
	ExitCode        *int32  `json:"exit_code"`
	Error           string  `json:"error"`
	CreatedAt       *string `json:"created_at"`
	AssignedAt      *string `json:"assigned_at"`
	StartedAt       *string `json:"started_at"`
	EndedAt         *string `json:"ended_at"`
	UpdatedAt       *string `json:"updated_at"`
	Deleted         bool    `json:"deleted"`
	// Final marks the last frame of the stream.
	Final bool `json:"final"`
}

// TaskView is the task API's view (GET /api/v1/tasks/{task_id}/events and
// /ws). Status changes and snapshots are "status" frames, progress reports
// "progress" frames, deletion a "deleted" frame. Lease renewals, spec
// updates, admissions, a release into the admission queue and saved
// checkpoints change nothing a frame shows and are skipped.
func TaskView(u Update) (Frame, bool) {
	event := EventStatus
	switch u.Event.GetEvent().(type) {
	case *taskv1.TaskEvent_Progressed:
		event = EventProgress
	case *taskv1.TaskEvent_LeaseRenewed, *taskv1.TaskEvent_Updated, *taskv1.TaskEvent_Admitted, *taskv1.TaskEvent_Checkpointed,
		*taskv1.TaskEvent_DependenciesMet:
		if !u.Final {
			return Frame{}, false
		}
	}
	if u.Deleted {
		event = EventDeleted
	}
	t := u.Task
	return Frame{Event: event, Data: TaskFrame{
		TaskID: t.GetId(), Version: u.Version, Change: ChangeName(u.Event),
		Status: t.GetStatus(), Progress: t.GetProgress(), ProgressMessage: t.GetProgressMessage(),
		AttemptID: t.GetAttemptId(), AssignedAgentID: t.GetAssignedAgentId(),
		RetryCount: t.GetRetryCount(), MaxRetries: t.GetMaxRetries(), ExitCode: t.ExitCode, Error: t.GetError(),
		CreatedAt: timeOf(t.GetCreatedAt()), AssignedAt: timeOf(t.GetAssignedAt()), StartedAt: timeOf(t.GetStartedAt()),
		EndedAt: timeOf(t.GetEndedAt()), UpdatedAt: timeOf(t.GetUpdatedAt()),
		Deleted: u.Deleted, Final: u.Final,
	}}, true
}

// ChangeName names the event of an update: the TaskEvent oneof field
// ("leased", "progressed", …), or "snapshot" for a scheduler snapshot.
func ChangeName(ev *taskv1.TaskEvent) string {
	if ev == nil {
		return "snapshot"
	}
	m := ev.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("event"))
	if fd == nil {
		return "unknown"
	}
	return string(fd.Name())
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
