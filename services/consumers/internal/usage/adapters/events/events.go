// Package events turns task events into what usage metering reads
// (domain.Event): the convert step of the usage consumer. Every task event
// has a case — one that meters or one that says the event means nothing
// to metering — and the lifecycle coverage test fails for a new event
// until it has one.
package events

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/domain/quantity"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/domain"
)

// ErrNoCase is returned for an event without a case.
var ErrNoCase = errors.New("usage: no case for the task event")

// ErrRefused is returned for an event carrying a value metering refuses:
// a GPU quantity the edge would not have accepted (package quantity). The
// consumer parks its record as a dead letter (docs/decisions/0025-dead-letters.md)
// rather than meter it as something else.
var ErrRefused = errors.New("usage: the task event carries a value metering refuses")

// GPUResource is the resource whose quantity counts GPUs.
const GPUResource = "nvidia.com/gpu"

// Convert reads one task event. An event carrying a GPU quantity the
// edge refuses is ErrRefused.
func Convert(ev *taskv1.TaskEvent) (e domain.Event, err error) {
	e = domain.Event{EventID: pg.CleanText(ev.GetEventId()), TaskID: pg.CleanText(ev.GetAggregateId()),
		TenantID: pg.CleanText(ev.GetTenantId()), Version: ev.GetVersion(), At: ev.GetOccurredAt().AsTime().UTC()}
	ended := func(attempt string, at interface{ AsTime() time.Time }, set bool) {
		e.Kind, e.AttemptID = domain.AttemptEnded, pg.CleanText(attempt)
		if set {
			e.EndedAt = at.AsTime().UTC()
		}
	}
	switch x := ev.GetEvent().(type) {
	case *taskv1.TaskEvent_Submitted:
		e.Kind, e.Stage = domain.Submitted, Stage(ev.GetActor(), x.Submitted.GetRequestId())
		if e.Spec, err = spec(x.Submitted.GetSpec(), x.Submitted.GetClusterQueue()); err != nil {
			return e, fmt.Errorf("%w: task %s v%d: %w", ErrRefused, ev.GetAggregateId(), ev.GetVersion(), err)
		}
	case *taskv1.TaskEvent_Updated:
		e.Kind = domain.Updated
		if e.Spec, err = spec(x.Updated.GetSpec(), x.Updated.GetClusterQueue()); err != nil {
			return e, fmt.Errorf("%w: task %s v%d: %w", ErrRefused, ev.GetAggregateId(), ev.GetVersion(), err)
		}
	case *taskv1.TaskEvent_Admitted:
		e.Kind, e.ClusterQueue, e.Flavor = domain.Admitted, pg.CleanText(x.Admitted.GetClusterQueue()), flavor(x.Admitted.GetFlavors())
	case *taskv1.TaskEvent_Started:
		e.Kind, e.AttemptID = domain.Started, pg.CleanText(x.Started.GetAttemptId())
	case *taskv1.TaskEvent_Succeeded:
		ended(x.Succeeded.GetAttemptId(), x.Succeeded.GetEndedAt(), x.Succeeded.GetEndedAt() != nil)
		e.Kind = domain.Succeeded
	case *taskv1.TaskEvent_Failed:
		ended(x.Failed.GetAttemptId(), x.Failed.GetEndedAt(), x.Failed.GetEndedAt() != nil)
	case *taskv1.TaskEvent_Canceled:
		ended(x.Canceled.GetAttemptId(), nil, false)
	case *taskv1.TaskEvent_Preempted:
		ended(x.Preempted.GetAttemptId(), nil, false)
	case *taskv1.TaskEvent_Suspended:
		ended(x.Suspended.GetAttemptId(), nil, false)
	case *taskv1.TaskEvent_LeaseExpired:
		ended(x.LeaseExpired.GetAttemptId(), nil, false)
	case *taskv1.TaskEvent_Leased, *taskv1.TaskEvent_Progressed, *taskv1.TaskEvent_LeaseRenewed,
		*taskv1.TaskEvent_RetryScheduled, *taskv1.TaskEvent_Requeued, *taskv1.TaskEvent_Deleted, *taskv1.TaskEvent_Expired,
		*taskv1.TaskEvent_Checkpointed, *taskv1.TaskEvent_DependenciesMet:
		// Nothing metered: running time is measured from Started to the
		// attempt's end, and a deleted task keeps the usage it had.
		e.Kind = domain.Ignored
	default:
		return e, fmt.Errorf("%w: task %s v%d", ErrNoCase, ev.GetAggregateId(), ev.GetVersion())
	}
	return e, nil
}

// PipelineActor is the actor of the tasks the conversion pipeline creates
// for a job's stages (docs/api/pipeline.md), and stageRequestPrefix begins
// their request ids: "pipeline/<job id>/<stage>".
const (
	PipelineActor      = "pipeline"
	stageRequestPrefix = "pipeline/"
)

// Stage is the pipeline stage a submitted task runs, "" when it is not a
// stage task. Both the actor and the request id must say so: a tenant
// may choose a request id like the pipeline's, but its tasks are
// submitted by its own key, and they stay CPU or GPU seconds.
func Stage(actor, requestID string) string {
	rest, ok := strings.CutPrefix(requestID, stageRequestPrefix)
	if actor != PipelineActor || !ok {
		return ""
	}
	job, stage, ok := strings.Cut(rest, "/")
	if !ok || job == "" || stage == "" || strings.Contains(stage, "/") {
		return ""
	}
	return pg.CleanText(stage)
}

func spec(s *taskv1.TaskSpec, clusterQueue string) (*domain.Spec, error) {
	gpus, err := GPUs(s.GetResources())
	if err != nil {
		return nil, err
	}
	out := &domain.Spec{Type: pg.CleanText(s.GetType()), GPUs: gpus,
		Queue: pg.CleanText(s.GetQueue()), ClusterQueue: pg.CleanText(clusterQueue)}
	if v := s.GetVideo(); v != nil {
		out.Model, out.Resolution, out.VideoSeconds = pg.CleanText(v.GetModel()), pg.CleanText(v.GetResolution()), float64(v.GetDuration())
	}
	return out, nil
}

// flavor is the flavor admission gave the GPUs, else the first by
// resource name.
func flavor(flavors map[string]string) string {
	if f, ok := flavors[GPUResource]; ok {
		return pg.CleanText(f)
	}
	keys := make([]string, 0, len(flavors))
	for k := range flavors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return pg.CleanText(flavors[keys[0]])
}

// GPUs is how many GPUs resources ask for: 0 without an nvidia.com/gpu
// entry (CPU work), else its quantity read by the one rule the edge
// checks it by (package quantity) — finite, non-negative and below
// math.MaxInt64/1000 (docs/api/usage.md, "What is metered"). A quantity
// that rule refuses is an error, never metered as some other number.
func GPUs(resources map[string]string) (float64, error) {
	q, ok := resources[GPUResource]
	if !ok {
		return 0, nil
	}
	n, err := quantity.Units(q)
	if err != nil {
		return 0, fmt.Errorf("resources[%s]: %w", GPUResource, err)
	}
	return n, nil
}
