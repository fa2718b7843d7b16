package views

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// event is task id's event e at version v, decoded as Decode would.
func event(t *testing.T, id string, v int64, e domain.Event) Event {
	t.Helper()
	rec := domain.Record{Event: e, At: t0.Add(time.Duration(v) * time.Second), Actor: "key-1"}
	env, err := codec.Envelope(fmt.Sprintf("ev-%s-%d", id, v), id, "tenant-a", v, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return Event{Envelope: env, Record: rec}
}

func submittedEvent(t *testing.T, id string) Event {
	spec, err := domain.NormalizeSpec(domain.SpecInput{Name: "n-" + id, Command: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	return event(t, id, 1, domain.Submitted{ID: id, TenantID: "tenant-a", CreatedBy: "key-1", Spec: spec})
}

func versions(c TaskChange) []int64 {
	var out []int64
	for _, e := range c.Events {
		out = append(out, e.Version)
	}
	return out
}

// A batch becomes one change per task, tasks in order of first appearance,
// events in topic order.
func TestConvertTaskViews(t *testing.T) {
	events := []Event{
		submittedEvent(t, "t1"),
		submittedEvent(t, "t2"),
		event(t, "t1", 2, domain.Leased{AttemptID: "a", AgentID: "ag", MachineID: "m"}),
		event(t, "t1", 3, domain.Started{AttemptID: "a"}),
	}
	got := ConvertTaskViews(events)
	if len(got) != 2 || got[0].TaskID != "t1" || got[1].TaskID != "t2" ||
		!reflect.DeepEqual(versions(got[0]), []int64{1, 2, 3}) || !reflect.DeepEqual(versions(got[1]), []int64{1}) {
		t.Fatalf("changes = %+v", got)
	}
	if got[0].Events[1].Record.Event.(domain.Leased).MachineID != "m" {
		t.Errorf("records not carried: %+v", got[0].Events[1])
	}
	if ConvertTaskViews(nil) != nil {
		t.Error("an empty batch made changes")
	}
}

// The fold applies only events above the stored version, and tells new
// rows from changed ones.
func TestFoldTaskViews(t *testing.T) {
	history := []Event{
		submittedEvent(t, "t1"),
		event(t, "t1", 2, domain.Leased{AttemptID: "a", AgentID: "ag", MachineID: "m"}),
		event(t, "t1", 3, domain.Started{AttemptID: "a"}),
	}
	at := func(n int) domain.Task { // the row after the first n events
		var task domain.Task
		for _, e := range history[:n] {
			task = domain.Apply(task, e.Record)
			task.Version = e.Envelope.GetVersion()
		}
		return task
	}
	tests := []struct {
		name             string
		stored           int // events in the stored row (0: no row)
		batch            []Event
		wantCreated      int64 // version of the created row, 0 = none
		wantChanged      int64
		wantChangedState domain.Status
	}{
		{"new task", 0, history[:2], 2, 0, ""},
		{"existing row moves on", 1, history[1:], 0, 3, domain.StatusRunning},
		{"redelivered batch with new events", 2, history, 0, 3, domain.StatusRunning},
		{"replayed batch", 3, history[1:], 0, 0, ""},
		{"older events only", 3, history[:1], 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			current := map[string]domain.Task{}
			if tt.stored > 0 {
				current["t1"] = at(tt.stored)
			}
			created, changed, err := FoldTaskViews(current, ConvertTaskViews(tt.batch))
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantCreated == 0 && len(created) != 0 || tt.wantCreated != 0 && (len(created) != 1 || created[0].Version != tt.wantCreated) {
				t.Errorf("created = %+v, want version %d", created, tt.wantCreated)
			}
			if tt.wantChanged == 0 && len(changed) != 0 ||
				tt.wantChanged != 0 && (len(changed) != 1 || changed[0].Version != tt.wantChanged || changed[0].Status != tt.wantChangedState) {
				t.Errorf("changed = %+v, want version %d", changed, tt.wantChanged)
			}
			if tt.wantChanged != 0 && !reflect.DeepEqual(changed[0], at(int(tt.wantChanged))) {
				t.Errorf("changed row differs from the fold of the whole history:\n got  %+v\n want %+v", changed[0], at(int(tt.wantChanged)))
			}
		})
	}
}

// An event that cannot be the next of its task — a version below 1, one
// past a gap, a first event that is no submission or submits another task,
// another tenant's — fails the fold (the runner parks its record), and the
// row is left as it was for the task's real next event.
func TestFoldTaskViewsRefusesEventsOutOfSequence(t *testing.T) {
	sub := submittedEvent(t, "t1")
	leased := event(t, "t1", 2, domain.Leased{AttemptID: "a", AgentID: "ag", MachineID: "m"})
	stored := func() map[string]domain.Task {
		task := domain.Apply(domain.Task{}, sub.Record)
		task.Version = 1
		return map[string]domain.Task{"t1": task}
	}
	otherTenant := leased
	otherTenant.Envelope = proto.Clone(leased.Envelope).(*taskv1.TaskEvent)
	otherTenant.Envelope.TenantId = "tenant-b"
	tests := []struct {
		name    string
		current map[string]domain.Task
		e       Event
		want    string
	}{
		{"version 0", stored(), event(t, "t1", 0, domain.Started{AttemptID: "a"}), "versions start at 1"},
		{"negative version", stored(), event(t, "t1", -1, domain.Started{AttemptID: "a"}), "versions start at 1"},
		{"a gap", stored(), event(t, "t1", 8, domain.Succeeded{AttemptID: "a"}), "does not follow version 1"},
		{"the largest version", stored(), event(t, "t1", math.MaxInt64, domain.Started{AttemptID: "a"}), "does not follow version 1"},
		{"a first event that is no submission", map[string]domain.Task{}, event(t, "t1", 1, domain.Succeeded{AttemptID: "a"}), "first event is its submission"},
		{"a submission at the next version", stored(), event(t, "t1", 2, domain.Submitted{ID: "t1", TenantID: "tenant-a"}), "only its first event"},
		{"a submission of another task", map[string]domain.Task{}, submittedEvent(t, "t2"), "submits task t2"},
		{"another tenant's", stored(), otherTenant, `is of tenant "tenant-b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			batch := ConvertTaskViews([]Event{tt.e})
			if tt.name == "a submission of another task" {
				batch[0].TaskID = "t1" // the record's key names t1
			}
			created, changed, err := FoldTaskViews(tt.current, batch)
			if err == nil || !strings.Contains(err.Error(), tt.want) || created != nil || changed != nil {
				t.Fatalf("fold = %v, %v, %v; want an error saying %q", created, changed, err, tt.want)
			}
		})
	}
	// The real next event still applies.
	_, changed, err := FoldTaskViews(stored(), ConvertTaskViews([]Event{leased}))
	if err != nil || len(changed) != 1 || changed[0].Version != 2 {
		t.Fatalf("the next event after the refusals: %v, %v", changed, err)
	}
}

// task_views has a case for every task event: the scheduler's fold.
func TestLifecycleCoverage(t *testing.T) {
	decode := func(ev *taskv1.TaskEvent) (Event, error) {
		r, err := codec.Record(ev)
		return Event{Envelope: ev, Record: r}, err
	}
	lifecycletest.EveryEvent(t, "the task_views projection (ConvertTaskViews and FoldTaskViews)", func(ev *taskv1.TaskEvent) error {
		e, err := decode(ev)
		if err != nil {
			return err
		}
		if !domain.Handles(e.Record.Event) {
			return fmt.Errorf("domain.Apply, which FoldTaskViews folds with, has no case for %s", e.Record.Event.EventName())
		}
		stored := map[string]domain.Task{"task-1": {ID: "task-1", TenantID: ev.GetTenantId(), Version: ev.GetVersion() - 1}}
		if _, ok := e.Record.Event.(domain.Submitted); ok {
			// A submission is a task's first event: no row before it.
			e.Envelope = proto.Clone(ev).(*taskv1.TaskEvent)
			e.Envelope.Version = 1
			stored = map[string]domain.Task{}
		}
		created, changed, err := FoldTaskViews(stored, ConvertTaskViews([]Event{e}))
		if err != nil {
			return err
		}
		if len(changed)+len(created) != 1 {
			return errors.New("the event changed no row")
		}
		return nil
	})
}
