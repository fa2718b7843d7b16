package live

import taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"

// VideoFrame is VideoView's data: a video generation's status and progress
// in the video API's vocabulary (docs/api/video.md#live-streams), with the
// same pairs of names its GET answers carry.
type VideoFrame struct {
	TaskID       string `json:"task_id"`
	TaskIDCamel  string `json:"taskId"`
	TaskStatus   string `json:"task_status"`
	StatusCamel  string `json:"taskStatus"`
	TaskProgress int32  `json:"taskProgress"`
	// Message is the failure's text when TaskStatus is FAILED.
	Message string `json:"message,omitempty"`
	Version int64  `json:"version"`
	// Final marks the last frame of the stream.
	Final bool `json:"final"`
}

// VideoStatus reads a task's status as a video status: waiting in any form
// is QUEUED; a deleted or expired task is UNKNOWN.
func VideoStatus(status string, deleted bool) string {
	if deleted {
		return "UNKNOWN"
	}
	switch status {
	case StatusPending, StatusAssigned, StatusPreempted, StatusSuspended:
		return "QUEUED"
	case StatusRunning:
		return "RUNNING"
	case StatusCompleted:
		return "SUCCEEDED"
	case StatusFailed:
		return "FAILED"
	case StatusCancelled:
		return "CANCELED"
	}
	return "UNKNOWN"
}

// VideoView is the video API's view (GET /v1/video/generations/{task_id}/
// events and /ws): a "status" frame when the video status changes (and
// first, as a snapshot), a "progress" frame when the generation reports
// progress. Task changes that leave the video status as it was (a lease, a
// renewal, an admission) are skipped.
func VideoView(u Update) (Frame, bool) {
	t := u.Task
	status := VideoStatus(t.GetStatus(), u.Deleted)
	event := EventStatus
	switch u.Event.GetEvent().(type) {
	case nil: // snapshot
	case *taskv1.TaskEvent_Progressed:
		event = EventProgress
	case *taskv1.TaskEvent_Leased, *taskv1.TaskEvent_LeaseRenewed, *taskv1.TaskEvent_Admitted, *taskv1.TaskEvent_Updated,
		*taskv1.TaskEvent_Checkpointed:
		// A lease (pending → assigned: both QUEUED), a renewal, an
		// admission, an update or a checkpoint leaves the video status as
		// it was.
		if !u.Final && !u.Deleted {
			return Frame{}, false
		}
	}
	f := VideoFrame{TaskID: t.GetId(), TaskIDCamel: t.GetId(), TaskStatus: status, StatusCamel: status,
		TaskProgress: t.GetProgress(), Version: u.Version, Final: u.Final}
	if status == "FAILED" {
		f.Message = t.GetError()
	}
	return Frame{Event: event, Data: f}, true
}
