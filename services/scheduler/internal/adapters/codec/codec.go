// Package codec converts task events between the domain's Go types and the
// protobuf envelope (taskv1.TaskEvent) that the event store keeps and Kafka
// carries. Decode(Encode(r)) == r for every event, which is what lets the
// inline projection and the Kafka projections be rebuilt from the log.
package codec

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// Envelope builds the topic envelope for one recorded event.
func Envelope(eventID, taskID, tenantID string, version int64, r domain.Record, trace map[string]string) (*taskv1.TaskEvent, error) {
	env := &taskv1.TaskEvent{
		EventId: eventID, AggregateId: taskID, Version: version, TenantId: tenantID,
		OccurredAt: taskproto.ToTimestamp(r.At), TraceContext: trace, Actor: r.Actor, ActorIp: r.IP,
	}
	switch e := r.Event.(type) {
	case domain.Submitted:
		env.Event = &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{Spec: taskproto.SpecToProto(e.Spec),
			RequestId: e.RequestID, FanoutId: e.FanoutID, ClusterQueue: e.ClusterQueue, HeldForDependencies: e.HeldForDependencies}}
		// Ids and the creator are the envelope's; CreatedBy rides in actor.
	case domain.Updated:
		env.Event = &taskv1.TaskEvent_Updated{Updated: &taskv1.TaskUpdated{Spec: taskproto.SpecToProto(e.Spec), ClusterQueue: e.ClusterQueue,
			HeldForDependencies: e.HeldForDependencies}}
	case domain.DependenciesMet:
		env.Event = &taskv1.TaskEvent_DependenciesMet{DependenciesMet: &taskv1.TaskDependenciesMet{Spec: taskproto.SpecToProto(e.Spec),
			ClusterQueue: e.ClusterQueue}}
	case domain.Admitted:
		env.Event = &taskv1.TaskEvent_Admitted{Admitted: &taskv1.TaskAdmitted{Queue: e.Queue, ClusterQueue: e.ClusterQueue, Flavors: e.Flavors}}
	case domain.Leased:
		env.Event = &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{AttemptId: e.AttemptID, AgentId: e.AgentID,
			MachineId: e.MachineID, LeaseExpiresAt: taskproto.ToTimestamp(e.LeaseExpiresAt), ClaimRequestId: e.ClaimRequestID}}
	case domain.Started:
		env.Event = &taskv1.TaskEvent_Started{Started: &taskv1.TaskStarted{AttemptId: e.AttemptID, MachineId: e.MachineID, LeaseExpiresAt: taskproto.ToTimestamp(e.LeaseExpiresAt)}}
	case domain.Progressed:
		env.Event = &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{AttemptId: e.AttemptID,
			Progress: int32(e.Progress), Message: e.Message}}
	case domain.LeaseRenewed:
		env.Event = &taskv1.TaskEvent_LeaseRenewed{LeaseRenewed: &taskv1.TaskLeaseRenewed{AttemptId: e.AttemptID, LeaseExpiresAt: taskproto.ToTimestamp(e.LeaseExpiresAt)}}
	case domain.Succeeded:
		env.Event = &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{AttemptId: e.AttemptID, MachineId: e.MachineID,
			ExitCode: int32(e.ExitCode), Result: resultToProto(e.Result), EndedAt: taskproto.ToTimestamp(e.EndedAt)}}
	case domain.Failed:
		f := &taskv1.TaskFailed{AttemptId: e.AttemptID, MachineId: e.MachineID, Error: e.Error, Reason: e.Reason, Result: resultToProto(e.Result),
			EndedAt: taskproto.ToTimestamp(e.EndedAt), RetryFollows: e.RetryFollows}
		if e.ExitCode != nil {
			c := int32(*e.ExitCode)
			f.ExitCode = &c
		}
		env.Event = &taskv1.TaskEvent_Failed{Failed: f}
	case domain.RetryScheduled:
		env.Event = &taskv1.TaskEvent_RetryScheduled{RetryScheduled: &taskv1.TaskRetryScheduled{RetryCount: int32(e.RetryCount),
			RetryAt: taskproto.ToTimestamp(e.RetryAt), Manual: e.Manual}}
	case domain.LeaseExpired:
		env.Event = &taskv1.TaskEvent_LeaseExpired{LeaseExpired: &taskv1.TaskLeaseExpired{AttemptId: e.AttemptID, AgentId: e.AgentID,
			Reason: e.Reason, RetryCount: int32(e.RetryCount), Failed: e.Failed}}
	case domain.Preempted:
		env.Event = &taskv1.TaskEvent_Preempted{Preempted: &taskv1.TaskPreempted{AttemptId: e.AttemptID, MachineId: e.MachineID, PreemptedBy: e.By, Reason: e.Reason}}
	case domain.Checkpointed:
		env.Event = &taskv1.TaskEvent_Checkpointed{Checkpointed: &taskv1.TaskCheckpointed{AttemptId: e.AttemptID, Key: e.Key,
			SizeBytes: e.SizeBytes, Sha256: e.SHA256}}
	case domain.Suspended:
		env.Event = &taskv1.TaskEvent_Suspended{Suspended: &taskv1.TaskSuspended{AttemptId: e.AttemptID, Reason: e.Reason}}
	case domain.Requeued:
		env.Event = &taskv1.TaskEvent_Requeued{Requeued: &taskv1.TaskRequeued{FromStatus: e.From, Reason: e.Reason}}
	case domain.Canceled:
		env.Event = &taskv1.TaskEvent_Canceled{Canceled: &taskv1.TaskCanceled{Reason: e.Reason, AttemptId: e.AttemptID}}
	case domain.Deleted:
		env.Event = &taskv1.TaskEvent_Deleted{Deleted: &taskv1.TaskDeleted{}}
	case domain.Expired:
		env.Event = &taskv1.TaskEvent_Expired{Expired: &taskv1.TaskExpired{}}
	default:
		return nil, fmt.Errorf("codec: unknown event %T", r.Event)
	}
	return env, nil
}

// Marshal is Envelope followed by proto.Marshal.
func Marshal(eventID, taskID, tenantID string, version int64, r domain.Record, trace map[string]string) ([]byte, error) {
	env, err := Envelope(eventID, taskID, tenantID, version, r, trace)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(env)
}

// Unmarshal decodes an envelope.
func Unmarshal(payload []byte) (*taskv1.TaskEvent, domain.Record, error) {
	var env taskv1.TaskEvent
	if err := proto.Unmarshal(payload, &env); err != nil {
		return nil, domain.Record{}, fmt.Errorf("codec: %w", err)
	}
	r, err := Record(&env)
	return &env, r, err
}

// Record turns an envelope back into the domain record.
func Record(env *taskv1.TaskEvent) (domain.Record, error) {
	r := domain.Record{At: taskproto.FromTimestamp(env.GetOccurredAt()), Actor: env.GetActor(), IP: env.GetActorIp()}
	switch e := env.GetEvent().(type) {
	case *taskv1.TaskEvent_Submitted:
		r.Event = domain.Submitted{ID: env.GetAggregateId(), TenantID: env.GetTenantId(), CreatedBy: env.GetActor(),
			RequestID: e.Submitted.GetRequestId(), FanoutID: e.Submitted.GetFanoutId(), Spec: specFromProto(e.Submitted.GetSpec()),
			ClusterQueue: e.Submitted.GetClusterQueue(), HeldForDependencies: e.Submitted.GetHeldForDependencies()}
	case *taskv1.TaskEvent_Updated:
		r.Event = domain.Updated{Spec: specFromProto(e.Updated.GetSpec()), ClusterQueue: e.Updated.GetClusterQueue(),
			HeldForDependencies: e.Updated.GetHeldForDependencies()}
	case *taskv1.TaskEvent_DependenciesMet:
		r.Event = domain.DependenciesMet{Spec: specFromProto(e.DependenciesMet.GetSpec()), ClusterQueue: e.DependenciesMet.GetClusterQueue()}
	case *taskv1.TaskEvent_Admitted:
		r.Event = domain.Admitted{Queue: e.Admitted.GetQueue(), ClusterQueue: e.Admitted.GetClusterQueue(), Flavors: e.Admitted.GetFlavors()}
	case *taskv1.TaskEvent_Leased:
		l := e.Leased
		r.Event = domain.Leased{AttemptID: l.GetAttemptId(), AgentID: l.GetAgentId(), MachineID: l.GetMachineId(),
			ClaimRequestID: l.GetClaimRequestId(), LeaseExpiresAt: taskproto.FromTimestamp(l.GetLeaseExpiresAt())}
	case *taskv1.TaskEvent_Started:
		r.Event = domain.Started{AttemptID: e.Started.GetAttemptId(), MachineID: e.Started.GetMachineId(), LeaseExpiresAt: taskproto.FromTimestamp(e.Started.GetLeaseExpiresAt())}
	case *taskv1.TaskEvent_Progressed:
		r.Event = domain.Progressed{AttemptID: e.Progressed.GetAttemptId(), Progress: int(e.Progressed.GetProgress()), Message: e.Progressed.GetMessage()}
	case *taskv1.TaskEvent_LeaseRenewed:
		r.Event = domain.LeaseRenewed{AttemptID: e.LeaseRenewed.GetAttemptId(), LeaseExpiresAt: taskproto.FromTimestamp(e.LeaseRenewed.GetLeaseExpiresAt())}
	case *taskv1.TaskEvent_Succeeded:
		s := e.Succeeded
		r.Event = domain.Succeeded{AttemptID: s.GetAttemptId(), MachineID: s.GetMachineId(), ExitCode: int(s.GetExitCode()), Result: resultFromProto(s.GetResult()), EndedAt: taskproto.FromTimestamp(s.GetEndedAt())}
	case *taskv1.TaskEvent_Failed:
		f := e.Failed
		ev := domain.Failed{AttemptID: f.GetAttemptId(), MachineID: f.GetMachineId(), Error: f.GetError(), Reason: f.GetReason(), Result: resultFromProto(f.GetResult()),
			EndedAt: taskproto.FromTimestamp(f.GetEndedAt()), RetryFollows: f.GetRetryFollows()}
		if f.ExitCode != nil {
			c := int(f.GetExitCode())
			ev.ExitCode = &c
		}
		r.Event = ev
	case *taskv1.TaskEvent_RetryScheduled:
		rs := e.RetryScheduled
		r.Event = domain.RetryScheduled{RetryCount: int(rs.GetRetryCount()), RetryAt: taskproto.FromTimestamp(rs.GetRetryAt()), Manual: rs.GetManual()}
	case *taskv1.TaskEvent_LeaseExpired:
		le := e.LeaseExpired
		r.Event = domain.LeaseExpired{AttemptID: le.GetAttemptId(), AgentID: le.GetAgentId(), Reason: le.GetReason(),
			RetryCount: int(le.GetRetryCount()), Failed: le.GetFailed()}
	case *taskv1.TaskEvent_Preempted:
		r.Event = domain.Preempted{AttemptID: e.Preempted.GetAttemptId(), MachineID: e.Preempted.GetMachineId(), By: e.Preempted.GetPreemptedBy(), Reason: e.Preempted.GetReason()}
	case *taskv1.TaskEvent_Checkpointed:
		c := e.Checkpointed
		r.Event = domain.Checkpointed{AttemptID: c.GetAttemptId(), Key: c.GetKey(), SizeBytes: c.GetSizeBytes(), SHA256: c.GetSha256()}
	case *taskv1.TaskEvent_Suspended:
		r.Event = domain.Suspended{AttemptID: e.Suspended.GetAttemptId(), Reason: e.Suspended.GetReason()}
	case *taskv1.TaskEvent_Requeued:
		r.Event = domain.Requeued{From: e.Requeued.GetFromStatus(), Reason: e.Requeued.GetReason()}
	case *taskv1.TaskEvent_Canceled:
		r.Event = domain.Canceled{Reason: e.Canceled.GetReason(), AttemptID: e.Canceled.GetAttemptId()}
	case *taskv1.TaskEvent_Deleted:
		r.Event = domain.Deleted{}
	case *taskv1.TaskEvent_Expired:
		r.Event = domain.Expired{}
	default:
		return r, fmt.Errorf("codec: envelope %s v%d: no case for its event (%s)", env.GetAggregateId(), env.GetVersion(), eventCase(env))
	}
	return r, nil
}

// eventCase names the oneof case an envelope holds, for errors.
func eventCase(env *taskv1.TaskEvent) string {
	m := env.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("event")); fd != nil {
		return string(fd.Name())
	}
	return "none"
}

func specFromProto(p *taskv1.TaskSpec) domain.Spec {
	s := domain.Spec{
		Name: p.GetName(), Type: p.GetType(), Command: p.GetCommand(), Args: p.GetArgs(), Workdir: p.GetWorkdir(), Env: p.GetEnv(),
		Timeout: int(p.GetTimeout()), Priority: int(p.GetPriority()), RetryDelay: int(p.GetRetryDelay()), MaxRetries: int(p.GetMaxRetries()),
		MachineID: p.GetMachineId(), GroupID: p.GetGroupId(), ParentID: p.GetParentId(), DependsOn: p.GetDependsOn(),
		LeaseTTL: int(p.GetLeaseTtlSec()), RenewInterval: int(p.GetRenewIntervalSec()), HeartbeatInterval: int(p.GetHeartbeatIntervalSec()),
		GracePeriod: int(p.GetGracePeriodSec()), Queue: p.GetQueue(),
		Mode: p.GetDistribution().GetMode(), Labels: p.GetDistribution().GetLabels(), ScatterCount: int(p.GetDistribution().GetCount()),
		Resources: p.GetResources(), Quota: p.GetQuota(), Video: taskproto.VideoFromProto(p.GetVideo()),
		Checkpoint: p.GetCheckpoint().GetEnabled(), Artifacts: p.GetArtifacts(),
		Webhook: p.GetWebhook().GetUrl(),
	}
	if ips := p.GetTargets().GetIps(); len(ips) == 1 {
		s.TargetIP = ips[0]
	}
	return s
}

func resultToProto(r *domain.Result) *taskv1.ResultRef {
	if r == nil {
		return nil
	}
	p := &taskv1.ResultRef{StorageType: r.StorageType, Stdout: r.Stdout, Stderr: r.Stderr, ObjectKey: r.ObjectKey, SizeBytes: r.SizeBytes, Sha256: r.SHA256}
	for _, a := range r.Artifacts {
		// The event keeps the object key in url's place; links are signed
		// only when the result is read.
		p.Artifacts = append(p.Artifacts, &taskv1.Artifact{Path: a.Path, Size: a.Size, Sha256: a.SHA256, Url: a.Key})
	}
	return p
}

func resultFromProto(p *taskv1.ResultRef) *domain.Result {
	if p == nil {
		return nil
	}
	r := &domain.Result{StorageType: p.GetStorageType(), Stdout: p.GetStdout(), Stderr: p.GetStderr(), ObjectKey: p.GetObjectKey(), SizeBytes: p.GetSizeBytes(), SHA256: p.GetSha256()}
	for _, a := range p.GetArtifacts() {
		r.Artifacts = append(r.Artifacts, domain.Artifact{Path: a.GetPath(), Key: a.GetUrl(), Size: a.GetSize(), SHA256: a.GetSha256()})
	}
	return r
}
