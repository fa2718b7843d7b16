package ports

import (
	"context"
	"log/slog"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	sports "github.com/taskmesh/taskmesh/services/scheduler/internal/ports"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// TemplateServer serves taskv1.TemplateService.
type TemplateServer struct {
	taskv1.UnimplementedTemplateServiceServer
	App *oapp.App
	Log *slog.Logger
}

func (s *TemplateServer) CreateTemplate(ctx context.Context, r *taskv1.CreateTemplateRequest) (*taskv1.CreateTemplateResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.App.CreateTemplate(ctx, c, taskproto.TemplateFromProto(r.GetTemplate()))
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "template"))
	}
	return &taskv1.CreateTemplateResponse{Template: taskproto.TemplateToProto(t)}, nil
}

func (s *TemplateServer) ListTemplates(ctx context.Context, r *taskv1.ListTemplatesRequest) (*taskv1.ListTemplatesResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	ts, next, err := s.App.ListTemplates(ctx, c, oapp.TemplateFilter{Category: r.GetCategory(), PageSize: int(r.GetPageSize()),
		PageToken: r.GetPageToken()})
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "template"))
	}
	resp := &taskv1.ListTemplatesResponse{NextPageToken: next, Templates: make([]*taskv1.TaskTemplate, 0, len(ts))}
	for _, t := range ts {
		resp.Templates = append(resp.Templates, taskproto.TemplateToProto(t))
	}
	return resp, nil
}

func (s *TemplateServer) GetTemplate(ctx context.Context, r *taskv1.GetTemplateRequest) (*taskv1.GetTemplateResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.App.GetTemplate(ctx, c, r.GetId())
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "template"))
	}
	return &taskv1.GetTemplateResponse{Template: taskproto.TemplateToProto(t)}, nil
}

func (s *TemplateServer) UpdateTemplate(ctx context.Context, r *taskv1.UpdateTemplateRequest) (*taskv1.UpdateTemplateResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.App.UpdateTemplate(ctx, c, r.GetId(), taskproto.TemplateFromProto(r.GetTemplate()), r.GetUpdateMask().GetPaths())
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "template"))
	}
	return &taskv1.UpdateTemplateResponse{Template: taskproto.TemplateToProto(t)}, nil
}

func (s *TemplateServer) DeleteTemplate(ctx context.Context, r *taskv1.DeleteTemplateRequest) (*taskv1.DeleteTemplateResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.App.DeleteTemplate(ctx, c, r.GetId()); err != nil {
		return nil, toStatus(s.Log, notFound(err, "template"))
	}
	return &taskv1.DeleteTemplateResponse{Id: r.GetId(), Deleted: true}, nil
}

func (s *TemplateServer) RunTemplate(ctx context.Context, r *taskv1.RunTemplateRequest) (*taskv1.RunTemplateResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	tasks, err := s.App.RunTemplate(ctx, c, r.GetId(), oapp.RunRequest{Variables: values(r.GetVariables()),
		Priority: intPtr(r.Priority), TargetMachines: r.GetTargets().GetMachineIds(), TargetIPs: r.GetTargets().GetIps(),
		RequestID: r.GetRequestId()})
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "template"))
	}
	resp := &taskv1.RunTemplateResponse{Task: taskproto.TaskToProto(tasks[0])}
	for _, t := range tasks {
		resp.TaskIds = append(resp.TaskIds, t.ID)
	}
	return resp, nil
}
