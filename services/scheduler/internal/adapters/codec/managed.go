package codec

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/taskproto"
)

// ManagedEnvelope turns a managed-service record into its envelope.
func ManagedEnvelope(eventID, aggregateID, tenantID string, version int64, r domain.Record, trace map[string]string) (*managedv1.ManagedServiceEvent, error) {
	env := &managedv1.ManagedServiceEvent{EventId: eventID, AggregateId: aggregateID, Version: version,
		OccurredAt: taskproto.ToTimestamp(r.At), TenantId: tenantID, TraceContext: trace, Actor: r.Actor}
	switch e := r.Event.(type) {
	case domain.Created:
		env.Event = &managedv1.ManagedServiceEvent_Created{Created: &managedv1.ServiceCreated{Spec: serviceSpecToProto(e.Spec), CreatedBy: e.CreatedBy}}
	case domain.Updated:
		env.Event = &managedv1.ManagedServiceEvent_Updated{Updated: &managedv1.ServiceUpdated{Spec: serviceSpecToProto(e.Spec)}}
	case domain.Deleted:
		env.Event = &managedv1.ManagedServiceEvent_Deleted{Deleted: &managedv1.ServiceDeleted{}}
	case domain.InstanceReported:
		in := e.Instance
		env.Event = &managedv1.ManagedServiceEvent_InstanceReported{InstanceReported: &managedv1.ServiceInstanceReported{
			AgentId: in.AgentID, CurrentState: in.State, Pid: int32(in.PID), Restarts: int32(in.Restarts), Version: in.Version, Error: in.Error}}
	default:
		return nil, fmt.Errorf("codec: no managed-service event for %T", r.Event)
	}
	return env, nil
}

// MarshalManaged encodes a managed-service record as its envelope.
func MarshalManaged(eventID, aggregateID, tenantID string, version int64, r domain.Record, trace map[string]string) ([]byte, error) {
	env, err := ManagedEnvelope(eventID, aggregateID, tenantID, version, r, trace)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(env)
}

// UnmarshalManaged decodes a managed-service envelope into its record.
func UnmarshalManaged(payload []byte) (*managedv1.ManagedServiceEvent, domain.Record, error) {
	var env managedv1.ManagedServiceEvent
	if err := proto.Unmarshal(payload, &env); err != nil {
		return nil, domain.Record{}, fmt.Errorf("codec: %w", err)
	}
	r, err := ManagedRecord(&env)
	return &env, r, err
}

// ManagedRecord turns an envelope back into the domain record.
func ManagedRecord(env *managedv1.ManagedServiceEvent) (domain.Record, error) {
	r := domain.Record{At: taskproto.FromTimestamp(env.GetOccurredAt()), Actor: env.GetActor()}
	switch e := env.GetEvent().(type) {
	case *managedv1.ManagedServiceEvent_Created:
		r.Event = domain.Created{ID: env.GetAggregateId(), TenantID: env.GetTenantId(), CreatedBy: e.Created.GetCreatedBy(),
			Spec: serviceSpecFromProto(e.Created.GetSpec())}
	case *managedv1.ManagedServiceEvent_Updated:
		r.Event = domain.Updated{Spec: serviceSpecFromProto(e.Updated.GetSpec())}
	case *managedv1.ManagedServiceEvent_Deleted:
		r.Event = domain.Deleted{}
	case *managedv1.ManagedServiceEvent_InstanceReported:
		x := e.InstanceReported
		r.Event = domain.InstanceReported{Instance: domain.Instance{AgentID: x.GetAgentId(), State: x.GetCurrentState(),
			PID: int(x.GetPid()), Restarts: int(x.GetRestarts()), Version: x.GetVersion(), Error: x.GetError()}}
	default:
		return r, fmt.Errorf("codec: managed-service envelope %s v%d has no known event", env.GetAggregateId(), env.GetVersion())
	}
	return r, nil
}

func serviceSpecToProto(s domain.Spec) *managedv1.ServiceSpec {
	return &managedv1.ServiceSpec{Name: s.Name, Version: s.Version, Command: s.Command, Args: s.Args, Env: s.Env,
		RestartPolicy: s.RestartPolicy, DesiredState: s.DesiredState, AgentId: s.AgentID, Labels: s.Labels,
		GracePeriodSec: int32(s.GracePeriod)}
}

func serviceSpecFromProto(p *managedv1.ServiceSpec) domain.Spec {
	return domain.Spec{Name: p.GetName(), Version: p.GetVersion(), Command: p.GetCommand(), Args: p.GetArgs(), Env: p.GetEnv(),
		RestartPolicy: p.GetRestartPolicy(), DesiredState: p.GetDesiredState(), AgentID: p.GetAgentId(), Labels: p.GetLabels(),
		GracePeriod: int(p.GetGracePeriodSec())}
}
