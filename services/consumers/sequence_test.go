package consumers_test

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/consumers"
)

// forged is a record of task's event at version, as something other than
// the relay could produce it.
func forged(t *testing.T, tenant, task string, version int64, at time.Time, ev *taskv1.TaskEvent) *kgo.Record {
	t.Helper()
	ev.EventId = fmt.Sprintf("forged-%s-%d-%s", task, version, tenant)
	ev.AggregateId, ev.Version, ev.TenantId, ev.OccurredAt, ev.Actor = task, version, tenant, timestamppb.New(at), "forger"
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: consumers.TaskTopic, Key: []byte(task), Value: b,
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte(ev.EventId)}}}
}

// Task events out of their task's sequence — past a gap, at the largest
// version, at version 0, of another tenant, a submission that is not the
// first event — are parked by usage and webhooks, not folded: the task's
// real next event (its cancellation) is still metered and notified, once.
func TestConsumersParkTaskEventsOutOfSequence(t *testing.T) {
	e := newEnv(t)
	rcv := newReceiver(t)
	s := e.start(consumers.Config{Webhooks: consumers.WebhookConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if _, err := s.hooks().SetWebhookEndpoint(tenantKey("acme"), &webhookv1.SetWebhookEndpointRequest{Url: rcv.URL + "/default"}); err != nil {
		t.Fatal(err)
	}
	at := func(sec int) time.Time { return day.Add(time.Duration(sec) * time.Second) }
	sc := newScript(t)
	sc.add("acme", "victim", at(0), submitted(&taskv1.TaskSpec{Name: "victim", Resources: map[string]string{"nvidia.com/gpu": "1"}}))
	sc.add("acme", "victim", at(10), started("a1"))
	bad := []*kgo.Record{
		forged(t, "acme", "victim", 8, at(20), succeeded("a1")),
		forged(t, "acme", "victim", math.MaxInt64, at(20), succeeded("a1")),
		forged(t, "acme", "victim", 0, at(20), succeeded("a1")),
		forged(t, "globex", "victim", 3, at(20), succeeded("a1")),
		forged(t, "acme", "victim", 3, at(20), submitted(&taskv1.TaskSpec{Name: "hijack"})),
	}
	sc.add("acme", "victim", at(70), cancelled())
	records := append(append(append([]*kgo.Record{}, sc.records[:2]...), bad...), sc.records[2:]...)
	e.produce(records)

	eventually(t, "the cancellation notified", func() bool { return len(rcv.at("/default")) == 1 })
	eventually(t, "the forged records parked by usage and webhooks", func() bool {
		l, err := s.deadLetters().ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{Service: "consumers"})
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, d := range l.GetDeadLetters() {
			per[d.GetProjection()]++
		}
		return per[consumers.Usage] == len(bad) && per[consumers.Webhooks] == len(bad) && len(l.GetDeadLetters()) == 2*len(bad)
	})
	if got := string(rcv.at("/default")[0].body); got != `{"task_id":"victim","status":"cancelled"}` {
		t.Errorf("notification %s, want the cancellation", got)
	}
	// The attempt ran from 10 s to the cancellation at 70 s on 1 GPU.
	var gpu float64
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(quantity), 0) FROM usage_records WHERE task_id = 'victim' AND kind = 'gpu'`).Scan(&gpu); err != nil {
		t.Fatal(err)
	}
	if gpu != 60 {
		t.Errorf("GPU seconds metered = %v, want 60", gpu)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(rcv.at("/default")); n != 1 {
		t.Errorf("%d notifications, want the one cancellation", n)
	}
}
