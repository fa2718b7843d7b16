package codec

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
)

// Every managed-service event round-trips, and the examples cover every
// case of the envelope's oneof.
func TestEveryManagedEventRoundTrips(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	spec := domain.Spec{Name: "hb", Version: "2", Command: "sleep", Args: []string{"1"}, Env: map[string]string{"A": "b"},
		RestartPolicy: "on-failure", DesiredState: "stopped", AgentID: "a1", Labels: []string{"gpu"}, GracePeriod: 5}
	events := []domain.Event{
		domain.Created{ID: "svc-1", TenantID: "t", CreatedBy: "key", Spec: spec},
		domain.Updated{Spec: spec},
		domain.Deleted{},
		domain.InstanceReported{Instance: domain.Instance{AgentID: "a1", State: "running", PID: 3, Restarts: 1, Version: "2", Error: "exit code 1"}},
	}
	seen := map[string]bool{}
	for _, e := range events {
		in := domain.Record{Event: e, At: at, Actor: "key"}
		payload, err := MarshalManaged("ev", "svc-1", "t", 1, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		env, out, err := UnmarshalManaged(payload)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("%T:\n in  %+v\n out %+v", e, in, out)
		}
		m := env.ProtoReflect()
		seen[string(m.WhichOneof(m.Descriptor().Oneofs().ByName("event")).Name())] = true
	}
	fields := (&managedv1.ManagedServiceEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event").Fields()
	for i := range fields.Len() {
		var f protoreflect.FieldDescriptor = fields.Get(i)
		if !seen[string(f.Name())] {
			t.Errorf("no example of %s", f.Name())
		}
	}
}
