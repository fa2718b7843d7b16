package admission_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/quota/admission"
)

// Records of the task topic that hold no event this build knows — bytes
// that do not decode, an empty record, a tombstone, an envelope without an
// event, one whose event is a case added after this build — are parked by
// the workload projection as dead letters, with their log line, and the
// task events behind them are applied. A known event that means nothing
// to workloads (TaskProgressed) is skipped, not parked.
func TestWorkloadsParkRecordsWithoutAKnownEvent(t *testing.T) {
	logs := &logbuf.Buffer{}
	e := newEnv(t, func(c *admission.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	noEvent, err := proto.Marshal(&taskv1.TaskEvent{EventId: "ev-no-event", AggregateId: "x", Version: 1, TenantId: "acme",
		OccurredAt: timestamppb.Now()})
	if err != nil {
		t.Fatal(err)
	}
	// Field 999 stands for an event case a newer scheduler added: this
	// build keeps it as an unknown field, and the oneof holds nothing.
	unknown := protowire.AppendTag(slices.Clone(noEvent), 999, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte{0x0a, 0x01, 'x'})
	bad := map[string][]byte{"ev-garbage": {0xff, 0xfe, 0x00}, "ev-empty": {}, "ev-tombstone": nil, "ev-no-event": noEvent,
		"ev-unknown": unknown}
	ids := []string{"ev-garbage", "ev-empty", "ev-tombstone", "ev-no-event", "ev-unknown"}
	for _, id := range ids {
		rec := &kgo.Record{Key: []byte("x"), Value: bad[id], Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte(id)}}}
		if err := e.producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	good := &task{id: "good", tenant: "acme", queue: admission.LowPriorityQueue, priority: 5, gpus: "1"}
	e.submit(good)
	e.waitState("good", "admitted", 1)
	progressed := &taskv1.TaskEvent{EventId: "ev-progressed", AggregateId: "good", Version: 2, TenantId: "acme",
		OccurredAt: timestamppb.Now(), Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{Progress: 50}}}
	e.produce("good", progressed)
	good.version = 2
	e.publish(good, &taskv1.TaskSucceeded{AttemptId: "a1"}) // v3
	e.waitState("good", "finished", 1)

	dl := deadletterv1.NewDeadLetterServiceClient(e.conn)
	var got []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := dl.ListDeadLetters(admin(), &deadletterv1.ListDeadLettersRequest{Service: "quota"})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, d := range l.GetDeadLetters() {
			got = append(got, d.GetEventId())
			if d.GetProjection() != admission.Workloads || !bytes.Equal(d.GetPayload(), bad[d.GetEventId()]) || d.GetError() == "" {
				t.Errorf("dead letter %v", d)
			}
		}
		if len(got) >= len(ids) || time.Now().After(deadline) {
			break
		}
	}
	if !slices.Equal(got, ids) {
		t.Errorf("parked %v, want %v", got, ids)
	}
	n := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `msg="record parked as a dead letter"`) && strings.Contains(line, " projection="+admission.Workloads+" ") {
			n++
		}
	}
	if n != len(ids) {
		t.Errorf("%d log lines of a parked record, want %d:\n%s", n, len(ids), logs.String())
	}
}
