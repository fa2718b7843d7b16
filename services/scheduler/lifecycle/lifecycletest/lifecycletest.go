// Package lifecycletest checks that a consumer of the task topic has a case
// for every task event. The events come from the TaskEvent oneof by
// reflection, so an event added to the proto is checked everywhere without
// anyone editing a list: each consumer's TestLifecycleCoverage fails until
// it has a case for it — one that acts, or one that says the event means
// nothing to that consumer.
package lifecycletest

import (
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// oneof is the TaskEvent oneof that holds the event.
const oneof = "event"

// Events returns one envelope per case of the TaskEvent event oneof, in
// field-number order: identity fields set (task "task-1" of tenant
// "tenant-a" at version 2), the event's own message empty.
func Events() []*taskv1.TaskEvent {
	var out []*taskv1.TaskEvent
	desc := (&taskv1.TaskEvent{}).ProtoReflect().Descriptor()
	fields := desc.Oneofs().ByName(oneof).Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &taskv1.TaskEvent{EventId: "event-1", AggregateId: "task-1", Version: 2, TenantId: "tenant-a",
			Actor: "key-1", OccurredAt: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		out = append(out, env)
	}
	return out
}

// Case names the oneof case an envelope holds ("submitted", "leased", …),
// or "" when it holds none.
func Case(ev *taskv1.TaskEvent) string {
	m := ev.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName(oneof))
	if fd == nil {
		return ""
	}
	return string(fd.Name())
}

// EveryEvent calls handle with each of Events and fails t for each one it
// returns an error for, naming the consumer and the event. handle is the
// consumer's convert step: it must report an event it has no case for as an
// error, and return nil both for an event it acts on and for one it
// deliberately ignores.
func EveryEvent(t testing.TB, consumer string, handle func(ev *taskv1.TaskEvent) error) {
	t.Helper()
	events := Events()
	if len(events) == 0 {
		t.Fatal("lifecycletest: TaskEvent has no event oneof cases")
	}
	for _, ev := range events {
		if err := handle(ev); err != nil {
			t.Errorf("%s has no case for task event %q (TaskEvent field %d): %v", consumer, Case(ev),
				ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName(oneof)).Number(), err)
		}
	}
}
