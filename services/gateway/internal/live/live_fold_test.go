package live

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

// The streams fold every task event with the scheduler's fold.
func TestLifecycleCoverage(t *testing.T) {
	snap := &taskv1.Task{Id: "task-1", Status: StatusRunning, Version: 1, AttemptId: "a1"}
	lifecycletest.EveryEvent(t, "the live streams' fold (lifecycle.Apply)", func(ev *taskv1.TaskEvent) error {
		_, _, err := lifecycle.Apply(proto.CloneOf(snap), ev)
		return err
	})
}

// An event this gateway cannot fold (a newer scheduler's) is shown through
// the scheduler's snapshot instead, and the stream goes on.
func TestStreamReadsTheSchedulerForAnUnknownEvent(t *testing.T) {
	h := newHarness(t)
	h.submit("t1", "acme")
	c := h.openSSE(path, "acme")
	c.next()
	ev := h.record("t1", leased("a1"))
	unknown := proto.CloneOf(ev)
	unknown.Event = nil // what an event added after this build decodes to
	h.publish(unknown)
	if got := summary([]map[string]any{c.next()}); got[0] != "2 status assigned snapshot" {
		t.Fatalf("frame for the unknown event = %v", got)
	}
	h.step("t1", started("a1"))
	h.step("t1", succeeded("a1"))
	got := summary(c.all())
	want := []string{"3 status running started", "4 status completed succeeded"}
	if !slices.Equal(got, want) {
		t.Fatalf("frames = %v, want %v", got, want)
	}
}
