package taskproto

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// TaskToProto shows a task as the task API documents it (GetTask, ListTasks,
// WatchTask and the gateway's live streams all render with it). machine_id
// is the target machine, or the machine running it when the task had no
// target; retry_at is shown only while a pending task waits for a retry.
func TaskToProto(t domain.Task) *taskv1.Task {
	p := &taskv1.Task{
		Id: t.ID, Name: t.Spec.Name, Type: t.Spec.Type, Command: t.Spec.Command, Args: t.Spec.Args, Workdir: t.Spec.Workdir,
		Env: t.Spec.Env, Timeout: int32(t.Spec.Timeout), Priority: int32(t.Spec.Priority), RetryCount: int32(t.RetryCount),
		RetryDelay: int32(t.Spec.RetryDelay), MaxRetries: int32(t.Spec.MaxRetries), Status: string(t.Status), Error: OptionalString(t.Error),
		CreatedAt: ToTimestamp(t.CreatedAt), AssignedAt: ToTimestamp(t.AssignedAt), StartedAt: ToTimestamp(t.StartedAt), EndedAt: ToTimestamp(t.EndedAt),
		MachineId: t.Spec.MachineID, GroupId: t.Spec.GroupID, ParentId: t.Spec.ParentID, DependsOn: t.Spec.DependsOn,
		AssignedAgentId: t.AgentID, LeaseExpiresAt: ToTimestamp(t.LeaseExpiresAt), AttemptId: t.AttemptID,
		Distribution: &taskv1.Distribution{Mode: t.Spec.Mode, MachineId: t.Spec.MachineID, Labels: t.Spec.Labels, Count: int32(t.Spec.ScatterCount)},
		LeaseTtlSec:  int32(t.Spec.LeaseTTL), RenewIntervalSec: int32(t.Spec.RenewInterval),
		HeartbeatIntervalSec: int32(t.Spec.HeartbeatInterval), GracePeriodSec: int32(t.Spec.GracePeriod),
		LastHeartbeatAt: ToTimestamp(t.LastHeartbeatAt), Progress: int32(t.Progress), ProgressMessage: t.ProgressMessage,
		Queue: t.Spec.Queue, Version: int32(t.Version), UpdatedAt: ToTimestamp(t.UpdatedAt),
		Resources: t.Spec.Resources, Quota: t.Spec.Quota, Video: VideoToProto(t.Spec.Video),
		ClusterQueue: t.ClusterQueue, Admitted: t.Admitted, HeldForDependencies: t.HeldForDependencies,
		CreatedBy: t.CreatedBy, Artifacts: t.Spec.Artifacts,
	}
	// Always present, so that a task that never enabled checkpoints shows
	// the documented default {"enabled": false} rather than null
	// (docs/api/tasks.md, "Task").
	p.Checkpoint = &taskv1.TaskCheckpoint{Enabled: t.Spec.Checkpoint}
	if c := t.Checkpoint; c != nil {
		p.Checkpoint.Key, p.Checkpoint.SizeBytes, p.Checkpoint.Sha256 = c.Key, c.SizeBytes, c.SHA256
		p.Checkpoint.AttemptId, p.Checkpoint.SavedAt = c.AttemptID, ToTimestamp(c.SavedAt)
	}
	if pr := t.Preemption; pr != nil {
		p.Preemption = &taskv1.PreemptedTask{TaskId: t.ID, Checkpoint: pr.Checkpoint, PreemptedAt: ToTimestamp(pr.PreemptedAt),
			PreemptedBy: pr.PreemptedBy}
	}
	if t.Spec.Webhook != "" {
		p.Webhook = &taskv1.Webhook{Url: t.Spec.Webhook}
	}
	if p.MachineId == "" {
		p.MachineId = t.AssignedMachine
	}
	if t.Status == domain.StatusPending && t.RetryAt.After(t.CreatedAt) {
		p.RetryAt = ToTimestamp(t.RetryAt)
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

// TaskFromProto reads back what TaskToProto shows, so that a task rendered
// by GetTask can be moved on by Apply (the gateway's live streams start from
// a GetTask answer and fold the events that follow).
//
// The rendering drops what a client is not shown (the tenant, the creator,
// the admission epoch and flavors, the last finished attempt, a target IP,
// the object key of a result, a retry time that is not due), so the task
// read back is not the aggregate. What holds — and
// TestRenderedTaskFoldsLikeTheAggregate checks for every event — is that
// TaskToProto(Apply(TaskFromProto(TaskToProto(t)), r)) equals
// TaskToProto(Apply(t, r)): nothing Apply reads to produce a shown field is
// among what was dropped.
func TaskFromProto(p *taskv1.Task) domain.Task {
	task := domain.Task{
		ID: p.GetId(), Version: int64(p.GetVersion()), Status: domain.Status(p.GetStatus()),
		RetryCount: int(p.GetRetryCount()), Error: p.GetError(),
		CreatedAt: FromTimestamp(p.GetCreatedAt()), UpdatedAt: FromTimestamp(p.GetUpdatedAt()), AssignedAt: FromTimestamp(p.GetAssignedAt()),
		StartedAt: FromTimestamp(p.GetStartedAt()), EndedAt: FromTimestamp(p.GetEndedAt()), RetryAt: FromTimestamp(p.GetRetryAt()),
		LeaseExpiresAt: FromTimestamp(p.GetLeaseExpiresAt()), LastHeartbeatAt: FromTimestamp(p.GetLastHeartbeatAt()),
		AgentID: p.GetAssignedAgentId(), AttemptID: p.GetAttemptId(),
		Progress: int(p.GetProgress()), ProgressMessage: p.GetProgressMessage(),
		ClusterQueue: p.GetClusterQueue(), Admitted: p.GetAdmitted(), HeldForDependencies: p.GetHeldForDependencies(), CreatedBy: p.GetCreatedBy(),
		Spec: domain.Spec{
			Name: p.GetName(), Type: p.GetType(), Command: p.GetCommand(), Args: p.GetArgs(), Workdir: p.GetWorkdir(),
			Env: p.GetEnv(), Timeout: int(p.GetTimeout()), Priority: int(p.GetPriority()),
			RetryDelay: int(p.GetRetryDelay()), MaxRetries: int(p.GetMaxRetries()),
			MachineID: p.GetDistribution().GetMachineId(), GroupID: p.GetGroupId(), ParentID: p.GetParentId(),
			DependsOn: p.GetDependsOn(), Mode: p.GetDistribution().GetMode(), Labels: p.GetDistribution().GetLabels(),
			ScatterCount: int(p.GetDistribution().GetCount()), LeaseTTL: int(p.GetLeaseTtlSec()),
			RenewInterval: int(p.GetRenewIntervalSec()), HeartbeatInterval: int(p.GetHeartbeatIntervalSec()),
			GracePeriod: int(p.GetGracePeriodSec()), Queue: p.GetQueue(), Resources: p.GetResources(),
			Quota: p.GetQuota(), Video: VideoFromProto(p.GetVideo()), Webhook: p.GetWebhook().GetUrl(),
			Checkpoint: p.GetCheckpoint().GetEnabled(), Artifacts: p.GetArtifacts(),
		},
	}
	if c := p.GetCheckpoint(); c.GetKey() != "" {
		task.Checkpoint = &domain.Checkpoint{Key: c.GetKey(), SizeBytes: c.GetSizeBytes(), SHA256: c.GetSha256(),
			AttemptID: c.GetAttemptId(), SavedAt: FromTimestamp(c.GetSavedAt())}
	}
	if pr := p.GetPreemption(); pr != nil {
		task.Preemption = &domain.Preemption{Checkpoint: pr.GetCheckpoint(), PreemptedAt: FromTimestamp(pr.GetPreemptedAt()),
			PreemptedBy: pr.GetPreemptedBy()}
		if task.Status == domain.StatusPreempted {
			task.PreemptedBy = pr.GetPreemptedBy()
		}
	}
	// machine_id shows the running machine only when the spec has no
	// target (see TaskToProto).
	if task.Spec.MachineID == "" {
		task.AssignedMachine = p.GetMachineId()
	}
	if p.ExitCode != nil {
		c := int(p.GetExitCode())
		task.ExitCode = &c
	}
	if p.GetStdout() != "" || p.GetStderr() != "" {
		task.Result = &domain.Result{Stdout: p.GetStdout(), Stderr: p.GetStderr()}
	}
	return task
}

// ToTimestamp renders a time for the API and the event codec; the zero
// time is unset.
func ToTimestamp(x time.Time) *timestamppb.Timestamp {
	if x.IsZero() {
		return nil
	}
	return timestamppb.New(x)
}

// FromTimestamp is ToTimestamp's inverse: unset is the zero time.
func FromTimestamp(x *timestamppb.Timestamp) time.Time {
	if x == nil {
		return time.Time{}
	}
	return x.AsTime()
}

// OptionalString is s as a proto3 optional string: unset (null in JSON)
// when empty, as the task API shows an error a task does not have.
func OptionalString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
