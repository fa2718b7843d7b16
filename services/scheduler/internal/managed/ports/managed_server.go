// Package ports serves the managed-service API (ManagedServiceService) and
// the agents' synchronisation (ServiceAgentService) over gRPC; errors map
// like the scheduler's other services (docs/api/services.md).
package ports

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
	sports "github.com/taskmesh/taskmesh/services/scheduler/internal/ports"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// ServiceServer serves managedv1.ManagedServiceService.
type ServiceServer struct {
	managedv1.UnimplementedManagedServiceServiceServer
	App *app.App
	Log *slog.Logger
}

// toStatus maps the use cases' errors like the scheduler's other services,
// except that a service that does not exist (or is another tenant's) is
// named as a service: the business code stays 30004, shared by every
// not-found answer of the scheduler (docs/api/services.md).
func toStatus(log *slog.Logger, err error) error {
	if errors.Is(err, task.ErrNotFound) {
		return grpcserver.CodeStatus(codes.NotFound, taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND, "service not found")
	}
	return sports.ToStatus(log, err)
}

func userCaller(ctx context.Context) (app.Caller, error) {
	c, err := sports.UserCaller(ctx)
	return app.Caller{Tenant: c.Tenant, Subject: c.Subject}, err
}

func (s *ServiceServer) CreateService(ctx context.Context, r *managedv1.CreateServiceRequest) (*managedv1.CreateServiceResponse, error) {
	c, err := userCaller(ctx)
	if err != nil {
		return nil, err
	}
	grace := domain.DefaultGracePeriod
	if r.GracePeriodSec != nil {
		grace = int(r.GetGracePeriodSec())
	}
	sv, err := s.App.Create(ctx, c, domain.Spec{Name: r.GetName(), Version: r.GetVersion(), Command: r.GetCommand(), Args: r.GetArgs(),
		Env: r.GetEnv(), RestartPolicy: r.GetRestartPolicy(), DesiredState: r.GetDesiredState(), AgentID: r.GetAgentId(),
		Labels: r.GetLabels(), GracePeriod: grace})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &managedv1.CreateServiceResponse{Service: ServiceToProto(sv)}, nil
}

func (s *ServiceServer) ListServices(ctx context.Context, _ *managedv1.ListServicesRequest) (*managedv1.ListServicesResponse, error) {
	c, err := userCaller(ctx)
	if err != nil {
		return nil, err
	}
	svcs, err := s.App.List(ctx, c)
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	out := &managedv1.ListServicesResponse{Services: make([]*managedv1.ManagedService, 0, len(svcs))}
	for _, sv := range svcs {
		out.Services = append(out.Services, ServiceToProto(sv))
	}
	return out, nil
}

func (s *ServiceServer) GetService(ctx context.Context, r *managedv1.GetServiceRequest) (*managedv1.GetServiceResponse, error) {
	c, err := userCaller(ctx)
	if err != nil {
		return nil, err
	}
	sv, err := s.App.Get(ctx, c, r.GetServiceId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &managedv1.GetServiceResponse{Service: ServiceToProto(sv)}, nil
}

func (s *ServiceServer) UpdateService(ctx context.Context, r *managedv1.UpdateServiceRequest) (*managedv1.UpdateServiceResponse, error) {
	c, err := userCaller(ctx)
	if err != nil {
		return nil, err
	}
	sv, err := s.App.Update(ctx, c, r.GetServiceId(), domain.Change{DesiredState: r.DesiredState, Version: r.Version,
		Command: r.Command, RestartPolicy: r.RestartPolicy, Args: r.GetArgs(), Env: r.GetEnv()})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &managedv1.UpdateServiceResponse{Service: ServiceToProto(sv)}, nil
}

func (s *ServiceServer) DeleteService(ctx context.Context, r *managedv1.DeleteServiceRequest) (*managedv1.DeleteServiceResponse, error) {
	c, err := userCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.App.Delete(ctx, c, r.GetServiceId()); err != nil {
		return nil, toStatus(s.Log, err)
	}
	return &managedv1.DeleteServiceResponse{ServiceId: r.GetServiceId(), Deleted: true}, nil
}

// AgentServer serves managedv1.ServiceAgentService.
type AgentServer struct {
	managedv1.UnimplementedServiceAgentServiceServer
	App *app.App
	Log *slog.Logger
}

func (s *AgentServer) SyncServices(ctx context.Context, r *managedv1.SyncServicesRequest) (*managedv1.SyncServicesResponse, error) {
	tc, err := sports.AgentCaller(ctx)
	if err != nil {
		return nil, err
	}
	c := app.Caller{Tenant: tc.Tenant, Subject: tc.Subject, AgentID: tc.AgentID}
	reports := make([]app.Report, 0, len(r.GetReports()))
	for _, rep := range r.GetReports() {
		reports = append(reports, app.Report{ServiceID: rep.GetServiceId(), Instance: domain.Instance{State: rep.GetCurrentState(),
			PID: int(rep.GetPid()), Restarts: int(rep.GetRestarts()), Version: rep.GetVersion(), Error: rep.GetError()}})
	}
	svcs, err := s.App.Sync(ctx, c, r.GetAgentId(), r.GetLabels(), reports)
	if err != nil {
		if errors.Is(err, app.ErrForbidden) {
			return nil, status.Errorf(codes.PermissionDenied, "this token belongs to agent %s, not %s", tc.AgentID, r.GetAgentId())
		}
		return nil, toStatus(s.Log, err)
	}
	out := &managedv1.SyncServicesResponse{Services: make([]*managedv1.ManagedService, 0, len(svcs))}
	for _, sv := range svcs {
		out.Services = append(out.Services, ServiceToProto(sv))
	}
	return out, nil
}

// ServiceToProto shows a service as the API documents it.
func ServiceToProto(sv domain.Service) *managedv1.ManagedService {
	state, pid, restarts, last := sv.Summary()
	sp := sv.Spec
	p := &managedv1.ManagedService{ServiceId: sv.ID, Name: sp.Name, Version: sp.Version, Command: sp.Command, Args: sp.Args,
		Env: sp.Env, RestartPolicy: sp.RestartPolicy, DesiredState: sp.DesiredState, CurrentState: state,
		LastHeartbeat: taskproto.ToTimestamp(last), AgentId: sp.AgentID, Labels: sp.Labels, Pid: int32(pid), Restarts: int32(restarts),
		GracePeriodSec: int32(sp.GracePeriod), CreatedBy: sv.CreatedBy, CreatedAt: taskproto.ToTimestamp(sv.CreatedAt),
		UpdatedAt: taskproto.ToTimestamp(sv.UpdatedAt), Revision: sv.Version}
	agents := make([]string, 0, len(sv.Instances))
	for a := range sv.Instances {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	for _, a := range slices.Compact(agents) {
		in := sv.Instances[a]
		p.Instances = append(p.Instances, &managedv1.ServiceInstance{AgentId: a, CurrentState: in.State, Pid: int32(in.PID),
			Restarts: int32(in.Restarts), Version: in.Version, LastHeartbeat: taskproto.ToTimestamp(in.At), Error: in.Error})
	}
	return p
}
