package ports

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// caller turns the authenticated principal into the use cases' Caller.
// Users and admins use TaskService; agents (and admins) LeaseService.
func caller(ctx context.Context, agentAPI bool) (app.Caller, error) {
	p, err := authn.Require(ctx)
	if err != nil {
		return app.Caller{}, err
	}
	switch {
	case p.Kind == authn.KindAdmin:
		return app.Caller{Tenant: "*", Subject: p.Subject, IP: p.RemoteIP, Tier: p.Tier}, nil
	case p.Kind == authn.KindUser && !agentAPI:
		return app.Caller{Tenant: p.TenantID, Subject: p.Subject, IP: p.RemoteIP, Tier: p.Tier}, nil
	case p.Kind == authn.KindAgent && agentAPI:
		tenant := p.TenantID
		if tenant == "" {
			tenant = "*" // a shared-pool agent serves every tenant
		}
		return app.Caller{Tenant: tenant, Subject: "agent:" + p.AgentID, AgentID: p.AgentID, IP: p.RemoteIP}, nil
	}
	return app.Caller{}, status.Errorf(codes.PermissionDenied, "a %s credential cannot call this API", p.Kind)
}

func intPtr(p *int32) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

// specInput maps a submitted spec; optional numbers stay nil so defaults
// apply.
func specInput(s *taskv1.TaskSpec) domain.SpecInput {
	in := domain.SpecInput{
		Name: s.GetName(), Type: s.GetType(), Command: s.GetCommand(), Args: s.GetArgs(), Workdir: s.GetWorkdir(), Env: s.GetEnv(),
		Timeout: intPtr(s.Timeout), Priority: intPtr(s.Priority), RetryDelay: intPtr(s.RetryDelay), MaxRetries: intPtr(s.MaxRetries),
		MachineID: s.GetMachineId(), GroupID: s.GetGroupId(), ParentID: s.GetParentId(), DependsOn: s.GetDependsOn(),
		Queue:    s.GetQueue(),
		LeaseTTL: intPtr(s.LeaseTtlSec), RenewInterval: intPtr(s.RenewIntervalSec), HeartbeatInterval: intPtr(s.HeartbeatIntervalSec),
		GracePeriod:    intPtr(s.GracePeriodSec),
		TargetMachines: s.GetTargets().GetMachineIds(), TargetIPs: s.GetTargets().GetIps(),
		Resources: s.GetResources(), Quota: s.GetQuota(), Video: taskproto.VideoFromProto(s.GetVideo()),
		Artifacts: s.GetArtifacts(), Webhook: s.GetWebhook().GetUrl(),
	}
	if d := s.GetDistribution(); d != nil {
		in.Mode, in.Labels, in.ScatterCount = d.GetMode(), d.GetLabels(), int(d.GetCount())
		if d.GetMachineId() != "" {
			in.MachineID = d.GetMachineId()
		}
	}
	if s.RepeatCount != nil {
		in.Repeat = int(s.GetRepeatCount())
	}
	// An update tells an absent checkpoint object (keep the setting) from
	// one that turns checkpointing off.
	if c := s.GetCheckpoint(); c != nil {
		in.Checkpoint = new(c.GetEnabled())
	}
	return in
}

// SpecInput is specInput for the scheduler's other gRPC services (a
// repeat's task), so a TaskSpec means the same everywhere.
func SpecInput(s *taskv1.TaskSpec) domain.SpecInput { return specInput(s) }

// ts renders a time as the API shows it (the zero time is unset).
func ts(t time.Time) *timestamppb.Timestamp { return taskproto.ToTimestamp(t) }

// taskToProto shows a task as the task API documents it; the rendering is
// shared with the gateway's live streams (taskproto.TaskToProto).
func taskToProto(t domain.Task) *taskv1.Task { return taskproto.TaskToProto(t) }

// UserCaller is the caller of a tenant's API (admins included) for the
// scheduler's other gRPC services (the video API).
func UserCaller(ctx context.Context) (app.Caller, error) { return caller(ctx, false) }

// AgentCaller is caller for the scheduler's other agent-facing services
// (managed services' synchronisation).
func AgentCaller(ctx context.Context) (app.Caller, error) { return caller(ctx, true) }
