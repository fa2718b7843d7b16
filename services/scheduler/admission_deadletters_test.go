package scheduler_test

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

	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// Records of the quota topic that hold no event this build knows — bytes
// that do not decode, an empty record, a tombstone, an envelope without an
// event, one whose event is a case added after this build — are parked by
// the admission_decisions projection as dead letters, with their log
// line, and the decision behind them is applied. A known quota event that
// is no decision (QuotaCreated) is skipped, not parked.
func TestAdmissionDecisionsParkRecordsWithoutAKnownEvent(t *testing.T) {
	logs := &logbuf.Buffer{}
	e := newAdmissionEnv(t, func(c *scheduler.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	premium := as(authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: "key-acme", Tier: "premium"})
	task := e.create(premium, &taskv1.TaskSpec{Name: "gpu", Command: "train", Queue: "premium",
		Resources: map[string]string{"nvidia.com/gpu": "2"}})
	workload := "workload/" + task.GetId()

	noEvent, err := proto.Marshal(&quotav1.QuotaEvent{EventId: "ev-no-event", AggregateId: workload})
	if err != nil {
		t.Fatal(err)
	}
	// Field 999 stands for an event case a newer quota service added: this
	// build keeps it as an unknown field, and the oneof holds nothing.
	unknown := protowire.AppendTag(slices.Clone(noEvent), 999, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte{0x0a, 0x01, 'x'})
	bad := map[string][]byte{"ev-garbage": {0xff, 0xfe, 0x00}, "ev-empty": {}, "ev-tombstone": nil, "ev-no-event": noEvent,
		"ev-unknown": unknown}
	ids := []string{"ev-garbage", "ev-empty", "ev-tombstone", "ev-no-event", "ev-unknown"}
	for _, id := range ids {
		rec := &kgo.Record{Key: []byte(workload), Value: bad[id], Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte(id)}}}
		if err := e.producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	e.decide(workload, &quotav1.QuotaEvent{EventId: "ev-quota", Event: &quotav1.QuotaEvent_QuotaCreated{QuotaCreated: &quotav1.QuotaCreated{}}})
	e.decide(workload, &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadAdmitted{WorkloadAdmitted: &quotav1.WorkloadAdmitted{
		TaskId: task.GetId(), ClusterQueue: "tenant-high-priority-queue", TaskVersion: 1,
		Flavors: map[string]string{"nvidia.com/gpu": "default-flavor"}}}})
	eventually(t, 20*time.Second, "admission after the bad records", func() bool { return e.get(task.GetId()).GetAdmitted() })

	dl := deadletterv1.NewDeadLetterServiceClient(e.conn)
	var got []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := dl.ListDeadLetters(as(authn.Principal{Kind: authn.KindAdmin, Subject: "op"}),
			&deadletterv1.ListDeadLettersRequest{Service: "scheduler"})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, d := range l.GetDeadLetters() {
			got = append(got, d.GetEventId())
			if d.GetProjection() != "admission_decisions" || !bytes.Equal(d.GetPayload(), bad[d.GetEventId()]) || d.GetError() == "" {
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
		if strings.Contains(line, `msg="record parked as a dead letter"`) && strings.Contains(line, " projection=admission_decisions ") {
			n++
		}
	}
	if n != len(ids) {
		t.Errorf("%d log lines of a parked record, want %d:\n%s", n, len(ids), logs.String())
	}
}
