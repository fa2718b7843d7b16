package ports

import (
	"context"
	"log/slog"

	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// LeaseServer serves taskv1.LeaseService, the executor protocol.
type LeaseServer struct {
	taskv1.UnimplementedLeaseServiceServer
	App *app.App
	Log *slog.Logger
}

func (s *LeaseServer) ClaimTasks(ctx context.Context, r *taskv1.ClaimTasksRequest) (*taskv1.ClaimTasksResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	tasks, requestID, err := s.App.ClaimTasks(ctx, c, app.ClaimRequest{AgentID: r.GetAgentId(), MachineID: r.GetMachineId(),
		RequestID: r.GetRequestId(), Labels: r.GetLabels(), Types: r.GetTypes(), Limit: int(r.GetLimit()), Wait: r.GetWait().AsDuration()})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	resp := &taskv1.ClaimTasksResponse{RequestId: requestID, Tasks: make([]*taskv1.Task, 0, len(tasks))}
	for _, t := range tasks {
		resp.Tasks = append(resp.Tasks, taskToProto(t))
	}
	return resp, nil
}

func (s *LeaseServer) StartTask(ctx context.Context, r *taskv1.StartTaskRequest) (*taskv1.StartTaskResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	t, err := s.App.StartTask(ctx, c, r.GetTaskId(), r.GetAgentId(), r.GetAttemptId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.StartTaskResponse{TaskId: t.ID, Status: string(t.Status), AttemptId: t.AttemptID,
		StartedAt: ts(t.StartedAt), LeaseExpiresAt: ts(t.LeaseExpiresAt)}, nil
}

func (s *LeaseServer) RenewTaskLease(ctx context.Context, r *taskv1.RenewTaskLeaseRequest) (*taskv1.RenewTaskLeaseResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	t, err := s.App.RenewLease(ctx, c, r.GetTaskId(), r.GetAgentId(), r.GetAttemptId(), int(r.GetExtendSec()))
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.RenewTaskLeaseResponse{TaskId: t.ID, Status: string(t.Status), AttemptId: t.AttemptID,
		LeaseExpiresAt: ts(t.LeaseExpiresAt)}, nil
}

func (s *LeaseServer) ReportTaskProgress(ctx context.Context, r *taskv1.ReportTaskProgressRequest) (*taskv1.ReportTaskProgressResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	t, err := s.App.ReportProgress(ctx, c, r.GetTaskId(), r.GetAgentId(), r.GetAttemptId(), int(r.GetProgress()), r.GetMessage())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.ReportTaskProgressResponse{TaskId: t.ID, Status: string(t.Status), AttemptId: t.AttemptID,
		Progress: int32(t.Progress), LastHeartbeatAt: ts(t.LastHeartbeatAt)}, nil
}

func (s *LeaseServer) CompleteTask(ctx context.Context, r *taskv1.CompleteTaskRequest) (*taskv1.CompleteTaskResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	in := app.Completion{AgentID: r.GetAgentId(), AttemptID: r.GetAttemptId(), ExitCode: int(r.GetExitCode()),
		Stdout: r.GetStdout(), Stderr: r.GetStderr(), Error: r.GetError(), PreemptedBy: r.GetPreemptedBy(), Cancelled: r.GetCancelled()}
	if r.EndedAt != nil {
		in.EndedAt = r.GetEndedAt().AsTime()
	}
	if o := r.GetResultObject(); o != nil {
		in.Object = &app.ResultObject{Key: o.GetKey(), Size: o.GetSizeBytes(), SHA256: o.GetSha256()}
	}
	for _, a := range r.GetArtifacts() {
		in.Artifacts = append(in.Artifacts, app.ReportedArtifact{Path: a.GetPath(), Size: a.GetSize(), SHA256: a.GetSha256()})
	}
	t, err := s.App.CompleteTask(ctx, c, r.GetTaskId(), in)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	// The first answer and a repeated one alike: how that attempt ended.
	status, ended := t.OutcomeOf(r.GetAttemptId())
	return &taskv1.CompleteTaskResponse{TaskId: t.ID, Status: string(status), AttemptId: r.GetAttemptId(), EndedAt: ts(ended)}, nil
}

func (s *LeaseServer) CreateResultUpload(ctx context.Context, r *taskv1.CreateResultUploadRequest) (*taskv1.CreateResultUploadResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	up, err := s.App.CreateResultUpload(ctx, c, r.GetTaskId(), r.GetAgentId(), r.GetAttemptId(), r.GetSizeBytes(), r.GetContentType(), r.GetSha256())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.CreateResultUploadResponse{UploadUrl: up.URL, Headers: up.Headers, ObjectKey: up.Key,
		ExpiresAt: timestamppb.New(up.ExpiresAt)}, nil
}

func (s *LeaseServer) SendHeartbeat(ctx context.Context, r *taskv1.SendHeartbeatRequest) (*taskv1.SendHeartbeatResponse, error) {
	c, err := caller(ctx, true)
	if err != nil {
		return nil, err
	}
	answer, err := s.App.SendHeartbeat(ctx, c, app.Heartbeat{AgentID: r.GetAgentId(), MachineID: r.GetMachineId(),
		Labels: r.GetLabels(), AttemptIDs: r.GetAttemptIds(), FreeSlots: int(r.GetFreeSlots()), Slots: int(r.GetSlots()),
		Version: r.GetVersion(), Isolation: r.GetIsolation(), Warnings: r.GetWarnings()})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	resp := &taskv1.SendHeartbeatResponse{NextHeartbeatBefore: timestamppb.New(s.App.NextHeartbeatBefore()), Drained: answer.Drained}
	for _, st := range answer.Stops {
		resp.Stop = append(resp.Stop, &taskv1.StopAttempt{TaskId: st.TaskID, AttemptId: st.AttemptID, Reason: st.Reason,
			GracePeriodSec: int32(st.GracePeriodSec)})
	}
	return resp, nil
}
