// Package codec converts job events between the pipeline domain's Go
// types and the protobuf envelope (pipelinev1.JobEvent) that the event
// store keeps and Kafka carries. Record(Envelope(r)) == r for every event,
// which is what lets the jobs table be rebuilt from the log.
package codec

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// Envelope builds the topic envelope of one recorded event.
func Envelope(eventID, jobID, tenantID string, version int64, r domain.Record, trace map[string]string) (*pipelinev1.JobEvent, error) {
	env := &pipelinev1.JobEvent{EventId: eventID, AggregateId: jobID, Version: version, TenantId: tenantID,
		OccurredAt: timestamppb.New(r.At), TraceContext: trace, Actor: r.Actor, ActorIp: r.IP}
	switch e := r.Event.(type) {
	case domain.Submitted:
		env.Event = &pipelinev1.JobEvent_Submitted{Submitted: &pipelinev1.JobSubmitted{
			ModelObject: e.Inputs.Model, QuantObject: e.Inputs.Quant, RefImageObjects: e.Inputs.RefImages,
			ModelKey: e.Keys.Model, QuantKey: e.Keys.Quant, RefImageKeys: e.Keys.RefImages}}
	case domain.StageQueued:
		env.Event = &pipelinev1.JobEvent_StageQueued{StageQueued: &pipelinev1.JobStageQueued{Stage: string(e.Stage), TaskId: e.TaskID}}
	case domain.Progressed:
		env.Event = &pipelinev1.JobEvent_Progressed{Progressed: &pipelinev1.JobProgressed{Stage: string(e.Stage),
			Progress: int32(e.Progress), Message: e.Message}}
	case domain.StageSucceeded:
		env.Event = &pipelinev1.JobEvent_StageSucceeded{StageSucceeded: &pipelinev1.JobStageSucceeded{Stage: string(e.Stage),
			TaskId: e.TaskID, OutputObject: e.Output}}
	case domain.Failed:
		env.Event = &pipelinev1.JobEvent_Failed{Failed: &pipelinev1.JobFailed{Step: string(e.Step), Reason: e.Reason, TaskId: e.TaskID}}
	default:
		return nil, fmt.Errorf("codec: unknown job event %T", r.Event)
	}
	return env, nil
}

// Marshal is Envelope followed by proto.Marshal.
func Marshal(eventID, jobID, tenantID string, version int64, r domain.Record, trace map[string]string) ([]byte, error) {
	env, err := Envelope(eventID, jobID, tenantID, version, r, trace)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(env)
}

// Record reads the domain record out of an envelope. The job id and
// tenant of Submitted are the envelope's.
func Record(env *pipelinev1.JobEvent) (domain.Record, error) {
	r := domain.Record{At: env.GetOccurredAt().AsTime(), Actor: env.GetActor(), IP: env.GetActorIp()}
	switch e := env.GetEvent().(type) {
	case *pipelinev1.JobEvent_Submitted:
		s := e.Submitted
		r.Event = domain.Submitted{ID: env.GetAggregateId(), TenantID: env.GetTenantId(),
			Inputs: domain.Inputs{Model: s.GetModelObject(), Quant: s.GetQuantObject(), RefImages: s.GetRefImageObjects()},
			Keys:   domain.InputKeys{Model: s.GetModelKey(), Quant: s.GetQuantKey(), RefImages: s.GetRefImageKeys()}}
	case *pipelinev1.JobEvent_StageQueued:
		r.Event = domain.StageQueued{Stage: domain.Stage(e.StageQueued.GetStage()), TaskID: e.StageQueued.GetTaskId()}
	case *pipelinev1.JobEvent_Progressed:
		p := e.Progressed
		r.Event = domain.Progressed{Stage: domain.Stage(p.GetStage()), Progress: int(p.GetProgress()), Message: p.GetMessage()}
	case *pipelinev1.JobEvent_StageSucceeded:
		s := e.StageSucceeded
		r.Event = domain.StageSucceeded{Stage: domain.Stage(s.GetStage()), TaskID: s.GetTaskId(), Output: s.GetOutputObject()}
	case *pipelinev1.JobEvent_Failed:
		f := e.Failed
		r.Event = domain.Failed{Step: domain.Stage(f.GetStep()), Reason: f.GetReason(), TaskID: f.GetTaskId()}
	default:
		return r, fmt.Errorf("codec: job event %s v%d has no event this build knows", env.GetAggregateId(), env.GetVersion())
	}
	return r, nil
}

// Unmarshal decodes a stored payload.
func Unmarshal(payload []byte) (*pipelinev1.JobEvent, domain.Record, error) {
	env := &pipelinev1.JobEvent{}
	if err := proto.Unmarshal(payload, env); err != nil {
		return nil, domain.Record{}, fmt.Errorf("codec: %w", err)
	}
	r, err := Record(env)
	return env, r, err
}
