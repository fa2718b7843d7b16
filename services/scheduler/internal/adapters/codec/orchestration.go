package codec

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// This file converts the orchestration events — task groups and templates
// — to and from their envelope (taskv1.OrchestrationEvent, the
// taskmesh.orchestration.events.v1 topic). As for tasks,
// OrchestrationRecord(OrchestrationEnvelope(r)) == r for every event.

// OrchestrationEnvelope builds the topic envelope of one group or template
// event.
func OrchestrationEnvelope(eventID, aggregateID, tenantID string, version int64, r orch.Record, trace map[string]string) (*taskv1.OrchestrationEvent, error) {
	env := &taskv1.OrchestrationEvent{EventId: eventID, AggregateId: aggregateID, Version: version, TenantId: tenantID,
		OccurredAt: taskproto.ToTimestamp(r.At), TraceContext: trace, Actor: r.Actor, ActorIp: r.IP}
	switch e := r.Event.(type) {
	case orch.Created:
		// The id, tenant and creator are the envelope's.
		env.Event = &taskv1.OrchestrationEvent_TaskGroupCreated{TaskGroupCreated: createdToProto(e)}
	case orch.Started:
		env.Event = &taskv1.OrchestrationEvent_TaskGroupStarted{TaskGroupStarted: &taskv1.TaskGroupStarted{}}
	case orch.Released:
		p := &taskv1.TaskGroupMembersReleased{}
		for _, m := range e.Members {
			p.Members = append(p.Members, &taskv1.ReleasedMember{Id: m.Key, TaskId: m.TaskID, Run: int32(m.Run), Attempt: int32(m.Attempt)})
		}
		env.Event = &taskv1.OrchestrationEvent_TaskGroupMembersReleased{TaskGroupMembersReleased: p}
	case orch.Changed:
		p := &taskv1.TaskGroupMembersChanged{}
		for _, c := range e.Members {
			p.Members = append(p.Members, &taskv1.MemberChange{Id: c.Key, TaskId: c.TaskID, FromStatus: string(c.From),
				Status: string(c.To), StartedAt: taskproto.ToTimestamp(c.StartedAt), EndedAt: taskproto.ToTimestamp(c.EndedAt),
				Error: c.Error})
		}
		env.Event = &taskv1.OrchestrationEvent_TaskGroupMembersChanged{TaskGroupMembersChanged: p}
	case orch.Completed:
		env.Event = &taskv1.OrchestrationEvent_TaskGroupCompleted{TaskGroupCompleted: &taskv1.TaskGroupCompleted{}}
	case orch.Failed:
		env.Event = &taskv1.OrchestrationEvent_TaskGroupFailed{TaskGroupFailed: &taskv1.TaskGroupFailed{Reason: e.Reason, MemberIds: e.Members}}
	case orch.Canceled:
		env.Event = &taskv1.OrchestrationEvent_TaskGroupCanceled{TaskGroupCanceled: &taskv1.TaskGroupCanceled{Reason: e.Reason}}
	case orch.Deleted:
		env.Event = &taskv1.OrchestrationEvent_TaskGroupDeleted{TaskGroupDeleted: &taskv1.TaskGroupDeleted{}}
	case orch.CircuitOpened:
		env.Event = &taskv1.OrchestrationEvent_TaskGroupCircuitOpened{TaskGroupCircuitOpened: &taskv1.TaskGroupCircuitOpened{
			ConsecutiveFailures: int32(e.ConsecutiveFailures), Failures: int32(e.Failures)}}
	case orch.RepeatReset:
		env.Event = &taskv1.OrchestrationEvent_TaskGroupRepeatReset{TaskGroupRepeatReset: &taskv1.TaskGroupRepeatReset{
			Operator: e.Operator, Reason: e.Reason}}
	case orch.TemplateCreated:
		env.Event = &taskv1.OrchestrationEvent_TemplateCreated{TemplateCreated: &taskv1.TemplateCreated{Template: taskproto.TemplateToProto(e.Template)}}
	case orch.TemplateUpdated:
		env.Event = &taskv1.OrchestrationEvent_TemplateUpdated{TemplateUpdated: &taskv1.TemplateUpdated{Template: taskproto.TemplateToProto(e.Template)}}
	case orch.TemplateDeleted:
		env.Event = &taskv1.OrchestrationEvent_TemplateDeleted{TemplateDeleted: &taskv1.TemplateDeleted{}}
	default:
		return nil, fmt.Errorf("codec: unknown orchestration event %T", r.Event)
	}
	return env, nil
}

// MarshalOrchestration is OrchestrationEnvelope followed by proto.Marshal.
func MarshalOrchestration(eventID, aggregateID, tenantID string, version int64, r orch.Record, trace map[string]string) ([]byte, error) {
	env, err := OrchestrationEnvelope(eventID, aggregateID, tenantID, version, r, trace)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(env)
}

// UnmarshalOrchestration decodes an orchestration envelope.
func UnmarshalOrchestration(payload []byte) (*taskv1.OrchestrationEvent, orch.Record, error) {
	var env taskv1.OrchestrationEvent
	if err := proto.Unmarshal(payload, &env); err != nil {
		return nil, orch.Record{}, fmt.Errorf("codec: %w", err)
	}
	r, err := OrchestrationRecord(&env)
	return &env, r, err
}

// OrchestrationRecord turns an orchestration envelope back into the domain
// record.
func OrchestrationRecord(env *taskv1.OrchestrationEvent) (orch.Record, error) {
	r := orch.Record{At: taskproto.FromTimestamp(env.GetOccurredAt()), Actor: env.GetActor(), IP: env.GetActorIp()}
	switch e := env.GetEvent().(type) {
	case *taskv1.OrchestrationEvent_TaskGroupCreated:
		r.Event = createdFromProto(env, e.TaskGroupCreated)
	case *taskv1.OrchestrationEvent_TaskGroupStarted:
		r.Event = orch.Started{}
	case *taskv1.OrchestrationEvent_TaskGroupMembersReleased:
		var rel orch.Released
		for _, m := range e.TaskGroupMembersReleased.GetMembers() {
			rel.Members = append(rel.Members, orch.Release{Key: m.GetId(), TaskID: m.GetTaskId(), Run: int(m.GetRun()), Attempt: int(m.GetAttempt())})
		}
		r.Event = rel
	case *taskv1.OrchestrationEvent_TaskGroupMembersChanged:
		var ch orch.Changed
		for _, c := range e.TaskGroupMembersChanged.GetMembers() {
			ch.Members = append(ch.Members, orch.Change{Key: c.GetId(), TaskID: c.GetTaskId(), From: domain.Status(c.GetFromStatus()),
				To: domain.Status(c.GetStatus()), StartedAt: taskproto.FromTimestamp(c.GetStartedAt()),
				EndedAt: taskproto.FromTimestamp(c.GetEndedAt()), Error: c.GetError()})
		}
		r.Event = ch
	case *taskv1.OrchestrationEvent_TaskGroupCompleted:
		r.Event = orch.Completed{}
	case *taskv1.OrchestrationEvent_TaskGroupFailed:
		r.Event = orch.Failed{Reason: e.TaskGroupFailed.GetReason(), Members: e.TaskGroupFailed.GetMemberIds()}
	case *taskv1.OrchestrationEvent_TaskGroupCanceled:
		r.Event = orch.Canceled{Reason: e.TaskGroupCanceled.GetReason()}
	case *taskv1.OrchestrationEvent_TaskGroupDeleted:
		r.Event = orch.Deleted{}
	case *taskv1.OrchestrationEvent_TaskGroupCircuitOpened:
		c := e.TaskGroupCircuitOpened
		r.Event = orch.CircuitOpened{ConsecutiveFailures: int(c.GetConsecutiveFailures()), Failures: int(c.GetFailures())}
	case *taskv1.OrchestrationEvent_TaskGroupRepeatReset:
		r.Event = orch.RepeatReset{Operator: e.TaskGroupRepeatReset.GetOperator(), Reason: e.TaskGroupRepeatReset.GetReason()}
	case *taskv1.OrchestrationEvent_TemplateCreated:
		r.Event = orch.TemplateCreated{Template: templateFromEvent(env, e.TemplateCreated.GetTemplate())}
	case *taskv1.OrchestrationEvent_TemplateUpdated:
		r.Event = orch.TemplateUpdated{Template: templateFromEvent(env, e.TemplateUpdated.GetTemplate())}
	case *taskv1.OrchestrationEvent_TemplateDeleted:
		r.Event = orch.TemplateDeleted{}
	default:
		return r, fmt.Errorf("codec: orchestration envelope %s v%d: no case for its event (%s)", env.GetAggregateId(),
			env.GetVersion(), orchestrationCase(env))
	}
	return r, nil
}

// templateFromEvent reads a template carried by an event: its tenant is
// the envelope's.
func templateFromEvent(env *taskv1.OrchestrationEvent, p *taskv1.TaskTemplate) orch.Template {
	t := taskproto.TemplateFromProto(p)
	t.TenantID = env.GetTenantId()
	return t
}

func orchestrationCase(env *taskv1.OrchestrationEvent) string {
	m := env.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("event")); fd != nil {
		return string(fd.Name())
	}
	return "none"
}

func createdToProto(e orch.Created) *taskv1.TaskGroupCreated {
	d := e.Def
	p := &taskv1.TaskGroupCreated{Name: d.Name, Mode: string(d.Mode), MaxParallel: int32(d.MaxParallel), RequestId: e.RequestID,
		WebhookUrl: d.Webhook}
	for _, m := range d.Members {
		p.Members = append(p.Members, &taskv1.TaskGroupMemberDefinition{Id: m.Key, Spec: taskproto.SpecToProto(m.Spec),
			DependsOn: m.DependsOn, ClusterQueue: m.ClusterQueue, TaskId: m.TaskID})
	}
	if r := d.Repeat; r != nil {
		p.Repeat = &taskv1.RepeatDefinition{Count: int32(r.Count), Parallel: int32(r.Parallel), IntervalSec: int32(r.IntervalSec),
			MaxFailures: int32(r.MaxFailures), BackoffSec: int32(r.BackoffSec), CircuitBreakerThreshold: int32(r.Threshold),
			Spec: taskproto.SpecToProto(r.Spec), ClusterQueue: r.ClusterQueue}
	}
	return p
}

func createdFromProto(env *taskv1.OrchestrationEvent, p *taskv1.TaskGroupCreated) orch.Created {
	c := orch.Created{ID: env.GetAggregateId(), TenantID: env.GetTenantId(), CreatedBy: env.GetActor(), RequestID: p.GetRequestId(),
		Def: orch.Definition{Name: p.GetName(), Mode: orch.Mode(p.GetMode()), MaxParallel: int(p.GetMaxParallel()),
			Webhook: p.GetWebhookUrl()}}
	for _, m := range p.GetMembers() {
		c.Def.Members = append(c.Def.Members, orch.MemberDef{Key: m.GetId(), Spec: specFromProto(m.GetSpec()),
			DependsOn: m.GetDependsOn(), ClusterQueue: m.GetClusterQueue(), TaskID: m.GetTaskId()})
	}
	if r := p.GetRepeat(); r != nil {
		c.Def.Repeat = &orch.RepeatDef{Count: int(r.GetCount()), Parallel: int(r.GetParallel()), IntervalSec: int(r.GetIntervalSec()),
			MaxFailures: int(r.GetMaxFailures()), BackoffSec: int(r.GetBackoffSec()), Threshold: int(r.GetCircuitBreakerThreshold()),
			Spec: specFromProto(r.GetSpec()), ClusterQueue: r.GetClusterQueue()}
	}
	return c
}
