package live

import (
	"testing"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

func TestVideoView(t *testing.T) {
	task := func(status string, progress int32, errText string) *taskv1.Task {
		p := &taskv1.Task{Id: "t1", Status: status, Progress: progress}
		if errText != "" {
			p.Error = &errText
		}
		return p
	}
	tests := []struct {
		name      string
		u         Update
		wantShown bool
		wantEvent string
		want      VideoFrame
	}{
		{"snapshot of a waiting task", Update{Task: task("pending", 0, ""), Version: 1}, true, EventStatus,
			VideoFrame{TaskStatus: "QUEUED", Version: 1}},
		{"a lease leaves it QUEUED", Update{Task: task("assigned", 0, ""), Version: 2,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Leased{}}}, false, "", VideoFrame{}},
		{"an admission leaves it QUEUED", Update{Task: task("pending", 0, ""), Version: 2,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Admitted{}}}, false, "", VideoFrame{}},
		{"a renewal leaves it RUNNING", Update{Task: task("running", 40, ""), Version: 5,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_LeaseRenewed{}}}, false, "", VideoFrame{}},
		{"a checkpoint leaves it QUEUED", Update{Task: task("preempted", 40, ""), Version: 7,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Checkpointed{}}}, false, "", VideoFrame{}},
		{"start", Update{Task: task("running", 0, ""), Version: 3,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Started{}}}, true, EventStatus,
			VideoFrame{TaskStatus: "RUNNING", Version: 3}},
		{"progress", Update{Task: task("running", 40, ""), Version: 4,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Progressed{}}}, true, EventProgress,
			VideoFrame{TaskStatus: "RUNNING", TaskProgress: 40, Version: 4}},
		{"preempted: waiting again", Update{Task: task("preempted", 40, ""), Version: 6,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Preempted{}}}, true, EventStatus,
			VideoFrame{TaskStatus: "QUEUED", TaskProgress: 40, Version: 6}},
		{"succeeded", Update{Task: task("completed", 100, ""), Version: 7, Final: true,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{}}}, true, EventStatus,
			VideoFrame{TaskStatus: "SUCCEEDED", TaskProgress: 100, Version: 7, Final: true}},
		{"failed shows why", Update{Task: task("failed", 10, "InvalidParameter: bad frame"), Version: 7, Final: true,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{}}}, true, EventStatus,
			VideoFrame{TaskStatus: "FAILED", TaskProgress: 10, Code: "InvalidParameter", Message: "bad frame", Version: 7, Final: true}},
		{"a failure without a code is an InternalError", Update{Task: task("failed", 10, "ffmpeg exited with status 1"), Version: 7, Final: true,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{}}}, true, EventStatus,
			VideoFrame{TaskStatus: "FAILED", TaskProgress: 10, Code: "InternalError", Message: "ffmpeg exited with status 1", Version: 7, Final: true}},
		{"succeeded shows 100 as GET does", Update{Task: task("completed", 97, ""), Version: 7, Final: true,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{}}}, true, EventStatus,
			VideoFrame{TaskStatus: "SUCCEEDED", TaskProgress: 100, Version: 7, Final: true}},
		{"cancelled", Update{Task: task("cancelled", 0, ""), Version: 2, Final: true,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Canceled{}}}, true, EventStatus,
			VideoFrame{TaskStatus: "CANCELED", Version: 2, Final: true}},
		{"deleted is UNKNOWN", Update{Task: task("completed", 100, ""), Version: 8, Deleted: true, Final: true,
			Event: &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Deleted{}}}, true, EventStatus,
			VideoFrame{TaskStatus: "UNKNOWN", TaskProgress: 100, Version: 8, Final: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, shown := VideoView(tt.u)
			if shown != tt.wantShown {
				t.Fatalf("shown = %v, want %v", shown, tt.wantShown)
			}
			if !shown {
				return
			}
			want := tt.want
			want.TaskID, want.TaskIDCamel, want.StatusCamel = "t1", "t1", want.TaskStatus
			if f.Event != tt.wantEvent || f.Data.(VideoFrame) != want {
				t.Errorf("frame = %s %+v, want %s %+v", f.Event, f.Data, tt.wantEvent, want)
			}
		})
	}
}
