package schedulertest

import (
	"context"

	"google.golang.org/grpc"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

type taskServer struct {
	taskv1.UnimplementedTaskServiceServer
	f *Fake
}

func (s *taskServer) CreateTask(ctx context.Context, r *taskv1.CreateTaskRequest) (*taskv1.CreateTaskResponse, error) {
	return call(s.f, ctx, "CreateTask", r, &taskv1.CreateTaskResponse{})
}

func (s *taskServer) ListTasks(ctx context.Context, r *taskv1.ListTasksRequest) (*taskv1.ListTasksResponse, error) {
	return call(s.f, ctx, "ListTasks", r, &taskv1.ListTasksResponse{})
}

func (s *taskServer) GetTask(ctx context.Context, r *taskv1.GetTaskRequest) (*taskv1.GetTaskResponse, error) {
	return call(s.f, ctx, "GetTask", r, &taskv1.GetTaskResponse{})
}

func (s *taskServer) UpdateTask(ctx context.Context, r *taskv1.UpdateTaskRequest) (*taskv1.UpdateTaskResponse, error) {
	return call(s.f, ctx, "UpdateTask", r, &taskv1.UpdateTaskResponse{})
}

func (s *taskServer) DeleteTask(ctx context.Context, r *taskv1.DeleteTaskRequest) (*taskv1.DeleteTaskResponse, error) {
	return call(s.f, ctx, "DeleteTask", r, &taskv1.DeleteTaskResponse{})
}

func (s *taskServer) CancelTask(ctx context.Context, r *taskv1.CancelTaskRequest) (*taskv1.CancelTaskResponse, error) {
	return call(s.f, ctx, "CancelTask", r, &taskv1.CancelTaskResponse{})
}

func (s *taskServer) RetryTask(ctx context.Context, r *taskv1.RetryTaskRequest) (*taskv1.RetryTaskResponse, error) {
	return call(s.f, ctx, "RetryTask", r, &taskv1.RetryTaskResponse{})
}

func (s *taskServer) GetTaskResult(ctx context.Context, r *taskv1.GetTaskResultRequest) (*taskv1.GetTaskResultResponse, error) {
	return call(s.f, ctx, "GetTaskResult", r, &taskv1.GetTaskResultResponse{})
}

// WatchTask records the call and runs the registered WatchFunc; without
// one it sends the task once, at progress 100.
func (s *taskServer) WatchTask(r *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error {
	s.f.record(stream.Context(), "WatchTask", r)
	s.f.mu.Lock()
	fn := s.f.watch
	s.f.mu.Unlock()
	if fn == nil {
		return stream.Send(&taskv1.WatchTaskResponse{Task: &taskv1.Task{Id: r.GetId(), Progress: 100}})
	}
	return fn(r, stream)
}

type leaseServer struct {
	taskv1.UnimplementedLeaseServiceServer
	f *Fake
}

func (s *leaseServer) ClaimTasks(ctx context.Context, r *taskv1.ClaimTasksRequest) (*taskv1.ClaimTasksResponse, error) {
	return call(s.f, ctx, "ClaimTasks", r, &taskv1.ClaimTasksResponse{})
}

func (s *leaseServer) StartTask(ctx context.Context, r *taskv1.StartTaskRequest) (*taskv1.StartTaskResponse, error) {
	return call(s.f, ctx, "StartTask", r, &taskv1.StartTaskResponse{})
}

func (s *leaseServer) RenewTaskLease(ctx context.Context, r *taskv1.RenewTaskLeaseRequest) (*taskv1.RenewTaskLeaseResponse, error) {
	return call(s.f, ctx, "RenewTaskLease", r, &taskv1.RenewTaskLeaseResponse{})
}

func (s *leaseServer) ReportTaskProgress(ctx context.Context, r *taskv1.ReportTaskProgressRequest) (*taskv1.ReportTaskProgressResponse, error) {
	return call(s.f, ctx, "ReportTaskProgress", r, &taskv1.ReportTaskProgressResponse{})
}

func (s *leaseServer) CompleteTask(ctx context.Context, r *taskv1.CompleteTaskRequest) (*taskv1.CompleteTaskResponse, error) {
	return call(s.f, ctx, "CompleteTask", r, &taskv1.CompleteTaskResponse{})
}

func (s *leaseServer) CreateResultUpload(ctx context.Context, r *taskv1.CreateResultUploadRequest) (*taskv1.CreateResultUploadResponse, error) {
	return call(s.f, ctx, "CreateResultUpload", r, &taskv1.CreateResultUploadResponse{})
}

func (s *leaseServer) SendHeartbeat(ctx context.Context, r *taskv1.SendHeartbeatRequest) (*taskv1.SendHeartbeatResponse, error) {
	return call(s.f, ctx, "SendHeartbeat", r, &taskv1.SendHeartbeatResponse{})
}

type fleetServer struct {
	taskv1.UnimplementedAgentFleetServiceServer
	f *Fake
}

func (s *fleetServer) ListFleetAgents(ctx context.Context, r *taskv1.ListFleetAgentsRequest) (*taskv1.ListFleetAgentsResponse, error) {
	return call(s.f, ctx, "ListFleetAgents", r, &taskv1.ListFleetAgentsResponse{})
}

func (s *fleetServer) SetAgentDrain(ctx context.Context, r *taskv1.SetAgentDrainRequest) (*taskv1.SetAgentDrainResponse, error) {
	return call(s.f, ctx, "SetAgentDrain", r, &taskv1.SetAgentDrainResponse{})
}
