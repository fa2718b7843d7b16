package kafka_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
)

func TestEnsureTopicsIsIdempotent(t *testing.T) {
	b := kafkatest.New(t, kafkatest.WithPartitions(5))
	cl := newClient(t, b.Config())
	ctx := testContext(t, 30*time.Second)
	compact := "compact"
	specs := []kafka.TopicSpec{
		{Name: "task-events", Partitions: 12, ReplicationFactor: -1},
		{Name: "quota-events", Partitions: 3, Configs: map[string]*string{"cleanup.policy": &compact}},
		{Name: "broker-default"}, // partitions and replication from the broker
	}
	for i := range 2 {
		if err := kafka.EnsureTopics(ctx, cl, specs...); err != nil {
			t.Fatalf("EnsureTopics call %d: %v", i+1, err)
		}
	}
	want := map[string]int32{"task-events": 12, "quota-events": 3, "broker-default": 5}
	for topic, n := range want {
		got, err := kafka.Partitions(ctx, cl, topic)
		if err != nil || got != n {
			t.Fatalf("Partitions(%s) = %d, %v; want %d", topic, got, err, n)
		}
	}

	rc, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, "quota-events")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rc.On("quota-events", nil)
	if err != nil {
		t.Fatal(err)
	}
	var policy string
	for _, c := range cfg.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", policy)
	}

	// An existing topic is fine even when the spec disagrees; the real
	// count stays what it was.
	if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: "task-events", Partitions: 4}); err != nil {
		t.Fatalf("EnsureTopics with a different partition count: %v", err)
	}
	if got, err := kafka.Partitions(ctx, cl, "task-events"); err != nil || got != 12 {
		t.Fatalf("Partitions(task-events) after re-ensure = %d, %v; want 12", got, err)
	}
}

func TestEnsureTopicsRejectsBadSpecs(t *testing.T) {
	b := kafkatest.New(t)
	cl := newClient(t, b.Config())
	ctx := testContext(t, 30*time.Second)
	if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{}); err == nil || !strings.Contains(err.Error(), "without a name") {
		t.Fatalf("nameless spec: err = %v", err)
	}
	if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: "a"}, kafka.TopicSpec{Name: "a"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate spec: err = %v", err)
	}
	// kfake accepts any name; EnsureTopics applies Kafka's rules itself.
	for _, name := range []string{"bad name", "..", "ünicode", strings.Repeat("x", 250)} {
		if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: name}); err == nil || !strings.Contains(err.Error(), "topic name") {
			t.Fatalf("topic name %q: err = %v, want a topic name error", name, err)
		}
	}
	// The broker's own rejection comes back per topic, wrapping kerr.
	err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: "ok"}, kafka.TopicSpec{Name: "three-replicas", ReplicationFactor: 3})
	if !errors.Is(err, kerr.InvalidReplicationFactor) || !strings.Contains(err.Error(), "three-replicas") {
		t.Fatalf("replication factor 3 on one broker: err = %v, want InvalidReplicationFactor naming the topic", err)
	}
	if err := kafka.EnsureTopics(ctx, cl); err != nil {
		t.Fatalf("no specs: %v", err)
	}
}

func TestPartitionsOfMissingTopic(t *testing.T) {
	b := kafkatest.New(t)
	cl := newClient(t, b.Config())
	ctx := testContext(t, 30*time.Second)
	for range 2 { // the first call must not auto-create the topic
		n, err := kafka.Partitions(ctx, cl, "nope")
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("Partitions(nope) = %d, %v; want UnknownTopicOrPartition", n, err)
		}
	}
}
