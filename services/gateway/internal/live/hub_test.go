package live

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// The hub hands a subscription only its task's events of its tenant, and
// skips records it cannot read without stopping.
func TestHubDeliversOnlyTheTasksEventsOfItsTenant(t *testing.T) {
	h := newHarness(t)
	h.submit("t1", "acme")
	mine := h.svc.hub.Subscribe("t1", "acme")
	defer mine.Close()
	theirs := h.svc.hub.Subscribe("t1", "other")
	defer theirs.Close()
	anyone := h.svc.hub.Subscribe("t1", "")
	defer anyone.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := []*kgo.Record{
		{Key: []byte("t1"), Value: []byte("not a task event")},
	}
	wrongKey := leased("a1")
	wrongKey.AggregateId, wrongKey.Version, wrongKey.TenantId = "t2", 2, "acme" // keyed t1, but not t1's
	raw, err := proto.Marshal(wrongKey)
	if err != nil {
		t.Fatal(err)
	}
	bad = append(bad, &kgo.Record{Key: []byte("t1"), Value: raw})
	for _, r := range bad {
		if err := h.prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	h.submit("t2", "acme")
	h.step("t2", leased("b1")) // nobody watches t2
	h.step("t1", leased("a1"))
	for name, s := range map[string]*Subscription{"mine": mine, "anyone": anyone} {
		select {
		case d := <-s.events:
			if d.event.GetVersion() != 2 || d.event.GetAggregateId() != "t1" {
				t.Errorf("%s got %v", name, d.event)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s got nothing", name)
		}
	}
	select {
	case d := <-theirs.events:
		t.Errorf("another tenant's subscription got %v", d.event)
	case <-time.After(200 * time.Millisecond):
	}
	if mine.Err() != nil {
		t.Errorf("Err = %v", mine.Err())
	}
}

// A failure the scheduler cannot confirm as final (it is unreachable, so
// whether a retry follows is unknown) does not end the stream; the next
// keep-alive asks again and ends it.
func TestFinalStateIsConfirmedOnceTheSchedulerAnswers(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.KeepAlive = 50 * time.Millisecond })
	h.submit("t1", "acme")
	c := h.openSSE(path, "acme")
	c.next()
	h.step("t1", leased("a1"))
	c.next()
	h.tasks.setErr(status.Error(codes.Unavailable, "scheduler down"))
	h.step("t1", &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{AttemptId: "a1", Error: "boom"}}})
	f := c.next()
	if d := f["data"].(map[string]any); d["status"] != "failed" || d["final"] != false {
		t.Fatalf("unconfirmed completion = %v", d)
	}
	time.Sleep(200 * time.Millisecond) // keep-alives while the scheduler is down
	select {
	case f, ok := <-c.frames:
		t.Fatalf("stream moved on while unconfirmed: %v %v", f, ok)
	default:
	}
	calls := func() int { h.tasks.mu.Lock(); defer h.tasks.mu.Unlock(); return h.tasks.calls }
	before := calls()
	h.tasks.setErr(nil)
	if rest := c.all(); len(rest) != 0 {
		t.Errorf("frames after confirming = %v", summary(rest))
	}
	if calls() == before {
		t.Error("the scheduler was not asked again")
	}
	if st := h.svc.Stats(); st.Ended["final"] != 1 {
		t.Errorf("stats = %+v", st)
	}
}
