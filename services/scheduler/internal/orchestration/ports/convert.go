// Package ports serves the orchestration APIs over gRPC (TaskGroupService,
// TemplateService): proto ↔ domain mapping and the errors of the
// orchestration use cases as statuses (the scheduler's mapping, plus
// ALREADY_EXISTS).
package ports

import (
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
	sports "github.com/taskmesh/taskmesh/services/scheduler/internal/ports"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// toStatus maps an error of the orchestration use cases to a status: by
// the scheduler's rules (sports.ToStatus), and ErrExists as
// ALREADY_EXISTS (30006).
func toStatus(log *slog.Logger, err error) error {
	if errors.Is(err, oapp.ErrExists) {
		return grpcserver.CodeStatus(codes.AlreadyExists, taskv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS, err.Error())
	}
	return sports.ToStatus(log, err)
}

// notFound names what is missing: the stores answer an unknown (or
// another tenant's) group or template with task.ErrNotFound itself, whose
// message speaks of a task. Any other error is returned as it is.
func notFound(err error, what string) error {
	if err == task.ErrNotFound { // the bare sentinel only: a wrapping error has words of its own
		return grpcserver.CodeStatus(codes.NotFound, taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND, what+" not found")
	}
	return err
}

func intPtr(p *int32) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

// memberRequest maps one submitted member.
func memberRequest(m *taskv1.TaskGroupTask) oapp.MemberRequest {
	in := task.SpecInput{
		Name: m.GetName(), Type: m.GetType(), Command: m.GetCommand(), Args: m.GetArgs(), Workdir: m.GetWorkdir(), Env: m.GetEnv(),
		Timeout: intPtr(m.Timeout), Priority: intPtr(m.Priority), RetryDelay: intPtr(m.RetryDelay), MaxRetries: intPtr(m.MaxRetries),
		MachineID: m.GetMachineId(), ParentID: m.GetParentId(), DependsOn: m.GetDependsOn(), Queue: m.GetQueue(),
		LeaseTTL: intPtr(m.LeaseTtlSec), RenewInterval: intPtr(m.RenewIntervalSec), HeartbeatInterval: intPtr(m.HeartbeatIntervalSec),
		GracePeriod: intPtr(m.GracePeriodSec), Resources: m.GetResources(), Quota: m.GetQuota(), Webhook: m.GetWebhook().GetUrl(),
		GroupID: m.GetGroupId(), TargetMachines: m.GetTargets().GetMachineIds(), TargetIPs: m.GetTargets().GetIps(),
		Repeat: int(m.GetRepeatCount()), Artifacts: m.GetArtifacts(),
	}
	if c := m.GetCheckpoint(); c != nil {
		in.Checkpoint = new(c.GetEnabled())
	}
	if d := m.GetDistribution(); d != nil {
		in.Mode, in.Labels, in.ScatterCount = d.GetMode(), d.GetLabels(), int(d.GetCount())
		if d.GetMachineId() != "" {
			in.MachineID = d.GetMachineId()
		}
	}
	return oapp.MemberRequest{ID: m.GetId(), Spec: in, TemplateID: m.GetTemplateId(), Variables: values(m.GetVariables())}
}

// groupRequest maps a create request.
func groupRequest(r *taskv1.CreateTaskGroupRequest) oapp.GroupRequest {
	g := oapp.GroupRequest{Name: r.GetName(), Mode: r.GetMode(), MaxParallel: int(r.GetMaxParallel()),
		Start: r.GetStart(), RequestID: r.GetRequestId(),
		Webhook: r.GetWebhook().GetUrl()}
	// The group's webhook is every member's and run's unless it has its own.
	hook := func(in *task.SpecInput) {
		if in.Webhook == "" {
			in.Webhook = r.GetWebhook().GetUrl()
		}
	}
	for _, m := range r.GetTasks() {
		mr := memberRequest(m)
		hook(&mr.Spec)
		g.Tasks = append(g.Tasks, mr)
	}
	if p := r.GetRepeat(); p != nil {
		g.Repeat = &oapp.RepeatRequest{RepeatInput: orch.RepeatInput{Count: int(p.GetCount()), Parallel: intPtr(p.Parallel),
			IntervalSec: intPtr(p.IntervalSec), MaxFailures: intPtr(p.MaxFailures), BackoffSec: intPtr(p.BackoffSec),
			Breaker: intPtr(p.CircuitBreakerThreshold)}, TemplateID: p.GetTemplateId(), Variables: values(p.GetVariables())}
		if p.GetTemplate() != nil {
			g.Repeat.Spec = sports.SpecInput(p.GetTemplate())
		}
		hook(&g.Repeat.Spec)
	}
	return g
}

// values reads template variables: strings, numbers (float64) and
// booleans; anything else is passed on for the template to refuse.
func values(m map[string]*structpb.Value) map[string]any {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v.AsInterface()
	}
	return out
}

// groupToProto shows a group as the API documents it; members are the
// ones to show (all, or none for lists, or those that changed).
func groupToProto(g orch.Group, members []orch.Member, tasks map[string]task.Task) *taskv1.TaskGroup {
	p := &taskv1.TaskGroup{Id: g.ID, Name: g.Name, Mode: string(g.Mode), Status: string(g.Status),
		CreatedAt: taskproto.ToTimestamp(g.CreatedAt), EndedAt: taskproto.ToTimestamp(g.EndedAt),
		StartedAt: taskproto.ToTimestamp(g.StartedAt), UpdatedAt: taskproto.ToTimestamp(g.UpdatedAt),
		Total: int32(g.Total), MaxParallel: int32(g.MaxParallel), Error: taskproto.OptionalString(g.Reason), Version: g.Version, CreatedBy: g.CreatedBy,
		Tasks: make([]*taskv1.TaskGroupMember, 0, len(members)),
		Counts: &taskv1.TaskGroupCounts{
			Pending: int32(g.Counts[task.StatusPending]), Assigned: int32(g.Counts[task.StatusAssigned]),
			Running: int32(g.Counts[task.StatusRunning]), Completed: int32(g.Counts[task.StatusCompleted]),
			Failed: int32(g.Counts[task.StatusFailed]), Cancelled: int32(g.Counts[task.StatusCancelled]),
			Preempted: int32(g.Counts[task.StatusPreempted]), Suspended: int32(g.Counts[task.StatusSuspended]),
		}}
	if r := g.Repeat; r != nil {
		p.Repeat = &taskv1.RepeatStatus{Count: int32(r.Count), Parallel: int32(r.Parallel), IntervalSec: int32(r.IntervalSec),
			MaxFailures: int32(r.MaxFailures), BackoffSec: int32(r.BackoffSec), CircuitBreakerThreshold: int32(r.Threshold),
			RunsCompleted: int32(r.Completed), Failures: int32(r.Failures), ConsecutiveFailures: int32(r.ConsecutiveFailures),
			CircuitOpen: r.CircuitOpen, NextRunAt: taskproto.ToTimestamp(g.NextWake()), ResetBy: r.ResetBy,
			ResetReason: r.ResetReason, ResetAt: taskproto.ToTimestamp(r.ResetAt), Template: taskproto.SpecToProto(r.Spec)}
	}
	if g.Webhook != "" {
		p.Webhook = &taskv1.Webhook{Url: g.Webhook}
	}
	for _, m := range members {
		pm := &taskv1.TaskGroupMember{Id: m.Key, TaskId: m.TaskID, Name: m.Name, Status: string(m.Status),
			DependsOn: m.DependsOn, Run: int32(m.Run), Attempt: int32(m.Attempt), StartedAt: taskproto.ToTimestamp(m.StartedAt),
			EndedAt: taskproto.ToTimestamp(m.EndedAt), Error: taskproto.OptionalString(m.Error), GroupId: g.ID}
		if t, ok := tasks[m.TaskID]; ok && m.TaskID != "" {
			withTask(pm, taskproto.TaskToProto(t))
		} else if !m.Released() && m.Spec.Name != "" {
			withSpec(pm, m.Spec)
		}
		p.Tasks = append(p.Tasks, pm)
	}
	return p
}

// withTask shows the member's task on its summary, as the task API shows
// it (stdout and stderr aside). Status, times and error stay the group's
// record of them, which its counts agree with.
func withTask(m *taskv1.TaskGroupMember, t *taskv1.Task) {
	m.Type, m.Command, m.Args, m.Workdir, m.Env = t.GetType(), t.GetCommand(), t.GetArgs(), t.GetWorkdir(), t.GetEnv()
	m.Timeout, m.Priority, m.RetryCount, m.RetryDelay, m.MaxRetries = t.GetTimeout(), t.GetPriority(), t.GetRetryCount(),
		t.GetRetryDelay(), t.GetMaxRetries()
	m.ExitCode, m.CreatedAt, m.AssignedAt, m.MachineId, m.ParentId = t.ExitCode, t.GetCreatedAt(), t.GetAssignedAt(),
		t.GetMachineId(), t.GetParentId()
	m.AssignedAgentId, m.LeaseExpiresAt, m.AttemptId = t.GetAssignedAgentId(), t.GetLeaseExpiresAt(), t.GetAttemptId()
}

// withSpec shows what a member not yet released will run.
func withSpec(m *taskv1.TaskGroupMember, s task.Spec) {
	m.Type, m.Command, m.Args, m.Workdir, m.Env = s.Type, s.Command, s.Args, s.Workdir, s.Env
	m.Timeout, m.Priority, m.RetryDelay, m.MaxRetries = int32(s.Timeout), int32(s.Priority), int32(s.RetryDelay), int32(s.MaxRetries)
	m.MachineId, m.ParentId = s.MachineID, s.ParentID
}
