package app

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
)

// Aggregate types and id prefixes of this layer's events.
const (
	AggregateWorkload     = "workload"
	AggregateClusterQueue = "cluster-queue"
	AggregateCohort       = "cohort"
	AggregateLocalQueue   = "local-queue"
)

// newEvent wraps one admission event in the quota topic's envelope.
func newEvent(aggType, name string, version int64, tenant, actor, actorIP string, at time.Time, ev any) (eventstore.Event, error) {
	env := &quotav1.QuotaEvent{EventId: uuid.NewString(), AggregateId: aggType + "/" + name, Version: version,
		OccurredAt: timestamppb.New(at), TenantId: tenant, Actor: actor, ActorIp: actorIP}
	var typ string
	switch e := ev.(type) {
	case *quotav1.ClusterQueueDefined:
		env.Event, typ = &quotav1.QuotaEvent_ClusterQueueDefined{ClusterQueueDefined: e}, "ClusterQueueDefined"
	case *quotav1.ClusterQueueDeleted:
		env.Event, typ = &quotav1.QuotaEvent_ClusterQueueDeleted{ClusterQueueDeleted: e}, "ClusterQueueDeleted"
	case *quotav1.CohortDefined:
		env.Event, typ = &quotav1.QuotaEvent_CohortDefined{CohortDefined: e}, "CohortDefined"
	case *quotav1.CohortDeleted:
		env.Event, typ = &quotav1.QuotaEvent_CohortDeleted{CohortDeleted: e}, "CohortDeleted"
	case *quotav1.LocalQueueDefined:
		env.Event, typ = &quotav1.QuotaEvent_LocalQueueDefined{LocalQueueDefined: e}, "LocalQueueDefined"
	case *quotav1.LocalQueueDeleted:
		env.Event, typ = &quotav1.QuotaEvent_LocalQueueDeleted{LocalQueueDeleted: e}, "LocalQueueDeleted"
	case *quotav1.WorkloadQueued:
		env.Event, typ = &quotav1.QuotaEvent_WorkloadQueued{WorkloadQueued: e}, "WorkloadQueued"
	case *quotav1.WorkloadAdmitted:
		env.Event, typ = &quotav1.QuotaEvent_WorkloadAdmitted{WorkloadAdmitted: e}, "WorkloadAdmitted"
	case *quotav1.WorkloadPreemptionRequested:
		env.Event, typ = &quotav1.QuotaEvent_WorkloadPreemptionRequested{WorkloadPreemptionRequested: e}, "WorkloadPreemptionRequested"
	case *quotav1.WorkloadEvicted:
		env.Event, typ = &quotav1.QuotaEvent_WorkloadEvicted{WorkloadEvicted: e}, "WorkloadEvicted"
	case *quotav1.WorkloadFinished:
		env.Event, typ = &quotav1.QuotaEvent_WorkloadFinished{WorkloadFinished: e}, "WorkloadFinished"
	default:
		return eventstore.Event{}, fmt.Errorf("admission: unknown event %T", ev)
	}
	payload, err := proto.Marshal(env)
	if err != nil {
		return eventstore.Event{}, fmt.Errorf("admission: encode %s: %w", typ, err)
	}
	return eventstore.Event{AggregateType: aggType, AggregateID: env.AggregateId, Version: version, Type: typ,
		EventID: env.EventId, TenantID: tenant, OccurredAt: at, Payload: payload}, nil
}
