package codec

import (
	"reflect"
	"testing"
	"time"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// Every event survives the envelope, and every case of the envelope's
// oneof has an example here: a new event without a case fails.
func TestEveryEventRoundTrips(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC)
	events := []domain.Event{
		domain.Submitted{ID: "j1", TenantID: "acme", Inputs: domain.Inputs{Model: "m", Quant: "q", RefImages: []string{"r1"}},
			Keys: domain.InputKeys{Model: "km", Quant: "kq", RefImages: []string{"kr1"}}},
		domain.StageQueued{Stage: domain.StageBIE, TaskID: "t1"},
		domain.Progressed{Stage: domain.StageONNX, Progress: 40, Message: "parsing"},
		domain.StageSucceeded{Stage: domain.StageNEF, TaskID: "t3", Output: "jobs/j1/output/result.nef"},
		domain.Failed{Step: domain.StageBIE, Reason: "quant.zip is not a zip", TaskID: "t2"},
	}
	covered := map[string]bool{}
	for _, e := range events {
		r := domain.Record{Event: e, At: at, Actor: "key-1", IP: "10.0.0.7"}
		payload, err := Marshal("00000000-0000-4000-8000-000000000001", "j1", "acme", 3, r, map[string]string{"traceparent": "x"})
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		env, got, err := Unmarshal(payload)
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%T: got %+v, want %+v", e, got, r)
		}
		m := env.ProtoReflect()
		covered[string(m.WhichOneof(m.Descriptor().Oneofs().ByName("event")).Name())] = true
	}
	fields := (&pipelinev1.JobEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event").Fields()
	for i := 0; i < fields.Len(); i++ {
		if name := string(fields.Get(i).Name()); !covered[name] {
			t.Errorf("JobEvent.%s has no example here", name)
		}
	}
}

func TestUnknownEventIsAnError(t *testing.T) {
	if _, err := Record(&pipelinev1.JobEvent{AggregateId: "j1", Version: 1}); err == nil {
		t.Error("an envelope without an event decoded")
	}
}
