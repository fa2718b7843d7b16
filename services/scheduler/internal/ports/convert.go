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
	return in
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// taskToProto shows a task as the task API documents it. machine_id is the
// target machine, or the machine running it when the task had no target.
func taskToProto(t domain.Task) *taskv1.Task {
	p := &taskv1.Task{
		Id: t.ID, Name: t.Spec.Name, Type: t.Spec.Type, Command: t.Spec.Command, Args: t.Spec.Args, Workdir: t.Spec.Workdir,
		Env: t.Spec.Env, Timeout: int32(t.Spec.Timeout), Priority: int32(t.Spec.Priority), RetryCount: int32(t.RetryCount),
		RetryDelay: int32(t.Spec.RetryDelay), MaxRetries: int32(t.Spec.MaxRetries), Status: string(t.Status), Error: t.Error,
		CreatedAt: ts(t.CreatedAt), AssignedAt: ts(t.AssignedAt), StartedAt: ts(t.StartedAt), EndedAt: ts(t.EndedAt),
		MachineId: t.Spec.MachineID, GroupId: t.Spec.GroupID, ParentId: t.Spec.ParentID, DependsOn: t.Spec.DependsOn,
		AssignedAgentId: t.AgentID, LeaseExpiresAt: ts(t.LeaseExpiresAt), AttemptId: t.AttemptID,
		Distribution: &taskv1.Distribution{Mode: t.Spec.Mode, MachineId: t.Spec.MachineID, Labels: t.Spec.Labels, Count: int32(t.Spec.ScatterCount)},
		LeaseTtlSec:  int32(t.Spec.LeaseTTL), RenewIntervalSec: int32(t.Spec.RenewInterval),
		HeartbeatIntervalSec: int32(t.Spec.HeartbeatInterval), GracePeriodSec: int32(t.Spec.GracePeriod),
		LastHeartbeatAt: ts(t.LastHeartbeatAt), Progress: int32(t.Progress), ProgressMessage: t.ProgressMessage,
		Queue: t.Spec.Queue, Version: int32(t.Version), UpdatedAt: ts(t.UpdatedAt),
		Resources: t.Spec.Resources, Quota: t.Spec.Quota, Video: taskproto.VideoToProto(t.Spec.Video),
		ClusterQueue: t.ClusterQueue, Admitted: t.Admitted,
	}
	if p.MachineId == "" {
		p.MachineId = t.AssignedMachine
	}
	if t.Status == domain.StatusPending && t.RetryAt.After(t.CreatedAt) {
		p.RetryAt = ts(t.RetryAt)
	}
	if t.ExitCode != nil {
		c := int32(*t.ExitCode)
		p.ExitCode = &c
	}
	if t.Result != nil {
		p.Stdout, p.Stderr = t.Result.Stdout, t.Result.Stderr
	}
	return p
}

// UserCaller is the caller of a tenant's API (admins included) for the
// scheduler's other gRPC services (the video API).
func UserCaller(ctx context.Context) (app.Caller, error) { return caller(ctx, false) }
