package events

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

func TestConvert(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	env := func(e *taskv1.TaskEvent) *taskv1.TaskEvent {
		e.EventId, e.AggregateId, e.TenantId, e.Version, e.OccurredAt = "ev", "t", "acme", 4, timestamppb.New(at)
		return e
	}
	e, err := Convert(env(&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{ClusterQueue: "cq",
		Spec: &taskv1.TaskSpec{Type: "video", Queue: "q", Resources: map[string]string{"nvidia.com/gpu": "2"},
			Video: &taskv1.VideoParams{Model: "wan2.2-t2v", Resolution: "720P", Duration: 5}}}}}))
	if err != nil || e.Kind != domain.Submitted || *e.Spec != (domain.Spec{Type: "video", GPUs: 2, Queue: "q", ClusterQueue: "cq",
		Model: "wan2.2-t2v", Resolution: "720P", VideoSeconds: 5}) || e.Version != 4 || !e.At.Equal(at) {
		t.Errorf("submitted = %+v %+v, %v", e, e.Spec, err)
	}
	e, _ = Convert(env(&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Admitted{Admitted: &taskv1.TaskAdmitted{ClusterQueue: "cq",
		Flavors: map[string]string{"cpu": "default", "nvidia.com/gpu": "A100"}}}}))
	if e.Kind != domain.Admitted || e.Flavor != "A100" || e.ClusterQueue != "cq" {
		t.Errorf("admitted = %+v", e)
	}
	e, _ = Convert(env(&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{AttemptId: "a", EndedAt: timestamppb.New(at.Add(-time.Second))}}}))
	if e.Kind != domain.AttemptEnded || e.AttemptID != "a" || !e.EndedAt.Equal(at.Add(-time.Second)) {
		t.Errorf("failed = %+v", e)
	}
	stage := env(&taskv1.TaskEvent{Actor: "pipeline", Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
		RequestId: "pipeline/0f8c-1/bie", Spec: &taskv1.TaskSpec{Type: "shell", Queue: "pipeline-bie"}}}})
	if e, _ = Convert(stage); e.Stage != "bie" {
		t.Errorf("stage task = %+v", e)
	}
	stage.Actor = "key-acme" // a tenant's own task with a request id like the pipeline's
	if e, _ = Convert(stage); e.Stage != "" {
		t.Errorf("tenant's task = %+v", e)
	}
	for actor, id := range map[string]string{"pipeline": "pipeline/0f8c-1", "pipeline ": "pipeline/j/onnx", "": "pipeline/j/onnx"} {
		if s := Stage(actor, id); s != "" {
			t.Errorf("Stage(%q, %q) = %q", actor, id, s)
		}
	}
	for q, want := range map[string]float64{"2": 2, "500m": 0.5, "1k": 1000, "1Gi": 1 << 30, "0": 0} {
		if got, err := GPUs(map[string]string{GPUResource: q}); err != nil || got != want {
			t.Errorf("GPUs(%q) = %v, %v; want %v", q, got, err, want)
		}
	}
	if got, err := GPUs(map[string]string{"cpu": "lots"}); err != nil || got != 0 {
		t.Errorf("GPUs without a GPU entry = %v, %v", got, err)
	}
}

// A GPU quantity the edge refuses is refused here too, whichever event
// carries the spec: never metered as some other number of GPUs.
func TestConvertRefusesQuantitiesTheEdgeRefuses(t *testing.T) {
	for _, q := range []string{"1e308", "NaN", "Inf", "-1000000", "lots", "", "99999999999999999999P", "0x10", "1/2"} {
		spec := &taskv1.TaskSpec{Name: "x", Resources: map[string]string{GPUResource: q}}
		for _, ev := range []*taskv1.TaskEvent{
			{AggregateId: "t", Version: 1, Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{Spec: spec}}},
			{AggregateId: "t", Version: 2, Event: &taskv1.TaskEvent_Updated{Updated: &taskv1.TaskUpdated{Spec: spec}}},
		} {
			if e, err := Convert(ev); !errors.Is(err, ErrRefused) {
				t.Errorf("%q in %T: %+v, %v; want ErrRefused", q, ev.GetEvent(), e, err)
			}
		}
	}
}

func TestLifecycleCoverage(t *testing.T) {
	lifecycletest.EveryEvent(t, "usage metering (events.Convert)", func(ev *taskv1.TaskEvent) error {
		_, err := Convert(ev)
		return err
	})
}
