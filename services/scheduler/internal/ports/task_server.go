package ports

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// TaskServer serves taskv1.TaskService.
type TaskServer struct {
	taskv1.UnimplementedTaskServiceServer
	App *app.App
	Log *slog.Logger
}

func (s *TaskServer) CreateTask(ctx context.Context, r *taskv1.CreateTaskRequest) (*taskv1.CreateTaskResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	requestID, err := createRequestID(r)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	create := s.App.CreateTasks
	if r.GetRequestId() == "" && r.GetSpec().GetId() != "" {
		// Named by the task file alone: not a retry key.
		create = s.App.CreateNamedTasks
	}
	tasks, err := create(ctx, c, specInput(r.GetSpec()), requestID)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	resp := &taskv1.CreateTaskResponse{Task: taskToProto(tasks[0])}
	for _, t := range tasks {
		resp.TaskIds = append(resp.TaskIds, t.ID)
	}
	return resp, nil
}

// createRequestID is the creation's idempotency key: request_id, else the
// spec's id (the client's own id for the task, as a task file names it).
// The two may not say different things.
func createRequestID(r *taskv1.CreateTaskRequest) (string, error) {
	id, requestID := r.GetSpec().GetId(), r.GetRequestId()
	switch {
	case id == "":
		return requestID, nil
	case id == "." || id == ".." || strings.Contains(id, "/"):
		// It names the task in routes (GET /api/v1/tasks/{id}), where
		// it must be one path segment.
		return "", &domain.InvalidError{Field: "id", Reason: fmt.Sprintf("%q cannot name a task in a route: no \"/\", and not \".\" or \"..\"", id)}
	case requestID != "" && requestID != id:
		return "", &domain.InvalidError{Field: "id", Reason: fmt.Sprintf("is %q but request_id is %q; they name the same creation", id, requestID)}
	}
	return id, nil
}

func (s *TaskServer) ListTasks(ctx context.Context, r *taskv1.ListTasksRequest) (*taskv1.ListTasksResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	f := app.ListFilter{Status: r.GetStatus(), Machine: r.GetMachineId(), Group: r.GetGroupId(), Type: r.GetType(),
		Priority: int(r.GetPriority()), PageSize: int(cmp.Or(r.GetPageSize(), r.GetLimit())), PageToken: r.GetPageToken(),
		Offset: int(r.GetOffset())}
	if r.GetPage() > 0 {
		if f.Offset, err = PageStart(int(r.GetPage()), f.PageSize, "tasks"); err != nil {
			return nil, toStatus(s.Log, err)
		}
	}
	if r.CreatedAfter != nil {
		f.CreatedAfter = r.GetCreatedAfter().AsTime()
	}
	if r.CreatedBefore != nil {
		f.CreatedBefore = r.GetCreatedBefore().AsTime()
	}
	tasks, next, err := s.App.ListTasks(ctx, c, f)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	resp := &taskv1.ListTasksResponse{NextPageToken: next, Tasks: make([]*taskv1.Task, 0, len(tasks))}
	for _, t := range tasks {
		resp.Tasks = append(resp.Tasks, taskToProto(t))
	}
	return resp, nil
}

func (s *TaskServer) GetTask(ctx context.Context, r *taskv1.GetTaskRequest) (*taskv1.GetTaskResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	t, err := s.App.GetTask(ctx, c, r.GetId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.GetTaskResponse{Task: taskToProto(t)}, nil
}

func (s *TaskServer) UpdateTask(ctx context.Context, r *taskv1.UpdateTaskRequest) (*taskv1.UpdateTaskResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	in := specInput(r.GetSpec())
	if err := in.Clear(r.GetUpdateMask().GetPaths()); err != nil {
		return nil, toStatus(s.Log, err)
	}
	t, err := s.App.UpdateTask(ctx, c, r.GetId(), in)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.UpdateTaskResponse{Task: taskToProto(t)}, nil
}

func (s *TaskServer) DeleteTask(ctx context.Context, r *taskv1.DeleteTaskRequest) (*taskv1.DeleteTaskResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	t, err := s.App.DeleteTask(ctx, c, r.GetId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	// The task's id, also when a client's name for it named it.
	return &taskv1.DeleteTaskResponse{Id: t.ID, Deleted: true}, nil
}

func (s *TaskServer) CancelTask(ctx context.Context, r *taskv1.CancelTaskRequest) (*taskv1.CancelTaskResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	t, err := s.App.CancelTask(ctx, c, r.GetId(), r.GetReason())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.CancelTaskResponse{Task: taskToProto(t)}, nil
}

func (s *TaskServer) RetryTask(ctx context.Context, r *taskv1.RetryTaskRequest) (*taskv1.RetryTaskResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	t, err := s.App.RetryTask(ctx, c, r.GetId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.RetryTaskResponse{Task: taskToProto(t)}, nil
}

func (s *TaskServer) SuspendTask(ctx context.Context, r *taskv1.SuspendTaskRequest) (*taskv1.SuspendTaskResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	t, err := s.App.SuspendTask(ctx, c, r.GetId(), r.GetReason())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.SuspendTaskResponse{Task: taskToProto(t)}, nil
}

func (s *TaskServer) ResumeTask(ctx context.Context, r *taskv1.ResumeTaskRequest) (*taskv1.ResumeTaskResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	t, err := s.App.ResumeTask(ctx, c, r.GetId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &taskv1.ResumeTaskResponse{Task: taskToProto(t)}, nil
}

func (s *TaskServer) GetTaskResult(ctx context.Context, r *taskv1.GetTaskResultRequest) (*taskv1.GetTaskResultResponse, error) {
	c, err := caller(ctx, false)
	if err != nil {
		return nil, err
	}
	res, err := s.App.GetResult(ctx, c, r.GetId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	t := res.Task
	out := &taskv1.TaskResult{TaskId: t.ID, Status: string(t.Status), Error: taskproto.OptionalString(t.Error)}
	if t.ExitCode != nil {
		c := int32(*t.ExitCode)
		out.ExitCode = &c
	}
	if t.Result != nil {
		out.StorageType, out.Stdout, out.Stderr = t.Result.StorageType, t.Result.Stdout, t.Result.Stderr
		out.SizeBytes, out.Sha256 = t.Result.SizeBytes, t.Result.SHA256
		if res.PresignedURL != "" {
			out.PresignedUrl, out.ExpiresIn = res.PresignedURL, int32(res.ExpiresIn/time.Second)
		}
		for _, a := range res.Artifacts {
			out.Artifacts = append(out.Artifacts, &taskv1.Artifact{Path: a.Path, Size: a.Size, Sha256: a.SHA256, Url: a.URL})
		}
		if len(res.Artifacts) > 0 {
			out.ExpiresIn = int32(res.ExpiresIn / time.Second)
		}
	} else if t.ExitCode != nil || t.Status == domain.StatusCompleted || t.Status == domain.StatusFailed {
		// An attempt ended without output: nothing was kept, but its
		// outcome is in the database like any small result, so a finished
		// task never reads as one still without a result.
		out.StorageType = "db"
	}
	return &taskv1.GetTaskResultResponse{Result: out}, nil
}

// WatchTask streams the task at once and after every change until it is
// final. Changes made by this replica arrive at once; others' are picked up
// by a once-a-second re-read.
func (s *TaskServer) WatchTask(r *taskv1.WatchTaskRequest, stream taskv1.TaskService_WatchTaskServer) error {
	ctx := stream.Context()
	c, err := caller(ctx, false)
	if err != nil {
		return err
	}
	// The request may name the task by the name its create gave it: the
	// changes are watched under the task's own id.
	first, err := s.App.GetTask(ctx, c, r.GetId())
	if err != nil {
		return toStatus(s.Log, err)
	}
	id := first.ID
	changes, cancel := s.App.Watch(id)
	defer cancel()
	var last int64 = -1
	for {
		t, err := s.App.GetTask(ctx, c, id)
		if err != nil {
			return toStatus(s.Log, err)
		}
		if t.Version != last {
			last = t.Version
			if err := stream.Send(&taskv1.WatchTaskResponse{Task: taskToProto(t)}); err != nil {
				return err
			}
		}
		if t.Status.Final() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-time.After(time.Second):
		}
	}
}

// PageStart is where page n (from 1) of a listing starts: after n-1 pages
// of pageSize entries (app.DefaultPageSize when 0). A page that would
// start past app.MaxListOffset is refused, naming page and what is listed.
func PageStart(page, pageSize int, what string) (int, error) {
	start := (page - 1) * cmp.Or(pageSize, app.DefaultPageSize)
	if start > app.MaxListOffset {
		return 0, &domain.InvalidError{Field: "page", Reason: fmt.Sprintf(
			"starts %d %s in, past the %d a page may start at; page on with page_token", start, what, app.MaxListOffset)}
	}
	return start, nil
}
