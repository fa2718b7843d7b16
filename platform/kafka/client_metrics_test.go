package kafka_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/taskmesh/taskmesh/platform/kafka"
)

// requestKeys records the keys of the requests a client writes.
type requestKeys struct {
	mu   sync.Mutex
	seen map[int16]int
}

func (r *requestKeys) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[key]++
}

func (r *requestKeys) count(key kmsg.Key) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[int16(key)]
}

// telemetryOf produces a record through a client of cfg, with or without
// the options every client takes, closes it (a client pushes its metrics a
// last time on close) and returns the keys it wrote.
func telemetryOf(t *testing.T, addrs []string, withClientOpts bool) *requestKeys {
	t.Helper()
	keys := &requestKeys{seen: map[int16]int{}}
	opts := []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.WithHooks(keys)}
	if withClientOpts {
		var err error
		if opts, err = (kafka.Config{Brokers: addrs}).Opts(); err != nil {
			t.Fatal(err)
		}
		opts = append(opts, kgo.WithHooks(keys))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(testContext(t, 10*time.Second), &kgo.Record{Topic: "metrics-probe", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	return keys
}

// The event log's clients do not push client metrics (KIP-714) to the
// brokers: each push allocated a fresh 4 MiB compression buffer. A bare
// client, against the same broker, does: the hook sees telemetry requests
// when there are any.
func TestClientsDoNotPushClientMetrics(t *testing.T) {
	addrs := startKfake(t, kfake.SeedTopics(1, "metrics-probe"))
	bare := telemetryOf(t, addrs, false)
	if bare.count(kmsg.GetTelemetrySubscriptions) == 0 {
		t.Fatalf("a bare client asked for no telemetry subscription (keys %v): the probe cannot tell", bare.seen)
	}
	ours := telemetryOf(t, addrs, true)
	if n, m := ours.count(kmsg.GetTelemetrySubscriptions), ours.count(kmsg.PushTelemetry); n+m != 0 {
		t.Errorf("a client from Config.Opts wrote %d GetTelemetrySubscriptions and %d PushTelemetry requests", n, m)
	}
	if ours.count(kmsg.Produce) == 0 {
		t.Errorf("the client from Config.Opts produced nothing (keys %v)", ours.seen)
	}
}
