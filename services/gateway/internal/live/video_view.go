package live

import (
	"context"
	"regexp"

	"google.golang.org/grpc"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
)

// VideoFrame is VideoView's data: a video generation's status and progress
// in the video API's vocabulary (docs/api/video.md#live-streams), with the
// same pairs of names its GET answers carry.
type VideoFrame struct {
	TaskID       string `json:"task_id"`
	TaskIDCamel  string `json:"taskId"`
	TaskStatus   string `json:"task_status"`
	StatusCamel  string `json:"taskStatus"`
	TaskProgress int32  `json:"taskProgress"`
	// Code and Message say why the generation failed when TaskStatus is
	// FAILED, split as the GET answer's data.code and data.message are.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// VideoURL links to the video on the SUCCEEDED frame: the result the
	// stream exists to deliver, as the GET answer's taskInput.video_url.
	VideoURL string `json:"video_url,omitempty"`
	Version  int64  `json:"version"`
	// Final marks the last frame of the stream.
	Final bool `json:"final"`
}

// Video statuses a frame may carry.
const (
	videoSucceeded = "SUCCEEDED"
	videoFailed    = "FAILED"
	videoUnknown   = "UNKNOWN"
)

// VideoStatus reads a task's status as a video status: waiting in any form
// is QUEUED; a deleted or expired task is UNKNOWN.
func VideoStatus(status string, deleted bool) string {
	if deleted {
		return videoUnknown
	}
	switch status {
	case StatusPending, StatusAssigned, StatusPreempted, StatusSuspended:
		return "QUEUED"
	case StatusRunning:
		return "RUNNING"
	case StatusCompleted:
		return videoSucceeded
	case StatusFailed:
		return videoFailed
	case StatusCancelled:
		return "CANCELED"
	}
	return videoUnknown
}

// failureCode is a video API error code leading a runner's error text, the
// rule the GET answer applies (services/scheduler/internal/video/app).
var failureCode = regexp.MustCompile(`^([A-Z][A-Za-z]+(?:\.[A-Za-z]+)*): (.*)$`)

// VideoFailure splits a failed task's error into the video API's code and
// message: "InvalidParameter: The size is not match" is InvalidParameter
// with "The size is not match"; any other text is an InternalError.
func VideoFailure(text string) (code, message string) {
	if m := failureCode.FindStringSubmatch(text); m != nil {
		return m[1], m[2]
	}
	if text == "" {
		text = "the generation failed"
	}
	return "InternalError", text
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
		*taskv1.TaskEvent_Checkpointed, *taskv1.TaskEvent_DependenciesMet:
		// A lease (pending → assigned: both QUEUED), a renewal, an
		// admission, an update, a release into the admission queue or a
		// checkpoint leaves the video status as it was.
		if !u.Final && !u.Deleted {
			return Frame{}, false
		}
	}
	f := VideoFrame{TaskID: t.GetId(), TaskIDCamel: t.GetId(), TaskStatus: status, StatusCamel: status,
		TaskProgress: t.GetProgress(), Version: u.Version, Final: u.Final}
	switch status {
	case videoFailed:
		f.Code, f.Message = VideoFailure(t.GetError())
	case videoSucceeded:
		// As the GET answer shows it (taskProgress is 100 once SUCCEEDED).
		f.TaskProgress = 100
	}
	return Frame{Event: event, Data: f}, true
}

// VideoReader reads a generation as the video API's GET answers it, as
// the caller in ctx; videov1.VideoServiceClient on the gateway's upstream
// connection is one.
type VideoReader interface {
	GetVideoGeneration(ctx context.Context, in *videov1.GetVideoGenerationRequest, opts ...grpc.CallOption) (*videov1.GetVideoGenerationResponse, error)
}

// videoResultView is VideoView whose SUCCEEDED frame also carries the
// link to the video, read through the video API as the stream's caller
// (ctx): the task event says where the result object is, only the video
// API signs the link to it. When the link cannot be read the frame goes
// out without it; the GET answer still has it.
func (s *Service) videoResultView(ctx context.Context, videos VideoReader) View {
	return func(u Update) (Frame, bool) {
		f, ok := VideoView(u)
		if !ok {
			return f, ok
		}
		vf := f.Data.(VideoFrame)
		if vf.TaskStatus != videoSucceeded {
			return f, ok
		}
		ctx, cancel := context.WithTimeout(ctx, getTaskTimeout)
		defer cancel()
		g, err := videos.GetVideoGeneration(ctx, &videov1.GetVideoGenerationRequest{TaskId: vf.TaskID})
		if err != nil {
			s.log.Warn("live stream: reading the video's link failed", "task_id", vf.TaskID, "err", err)
			return f, ok
		}
		vf.VideoURL = g.GetData().GetTaskInput().GetVideoUrl().GetValue()
		f.Data = vf
		return f, ok
	}
}
