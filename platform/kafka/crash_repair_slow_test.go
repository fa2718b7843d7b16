package kafka

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The repair's scan outlives a fetch slower than a client's default
// request timeout (10 s). On a saturated machine one 16 MiB fetch of the
// scan took longer than that, the repair failed, and the broker exited at
// start after a crash and stayed down.
func TestRepairWaitsForASlowFetch(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "relayed"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), repairTimeout)
	defer cancel()

	// One transaction written and never ended, as a crash leaves it.
	producer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("relay"), kgo.DefaultProduceTopic("relayed"))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The scan's first fetch is answered after 11 s, past the default.
	const slow = 11 * time.Second
	var delayed atomic.Bool
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		if delayed.CompareAndSwap(false, true) {
			c.SleepControl(func() { time.Sleep(slow) })
		}
		return nil, nil, false // answered by the broker as usual
	})

	start := time.Now()
	open, err := abortOpenTransactions(ctx, c.ListenAddrs())
	if err != nil {
		t.Fatalf("the repair gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if !delayed.Load() || time.Since(start) < slow {
		t.Fatalf("the scan's fetch was not delayed (%s)", time.Since(start))
	}
	if len(open) != 1 || open[0].topic != "relayed" || open[0].partition != 0 || open[0].first != 0 {
		t.Fatalf("aborted %+v, want the one transaction on relayed/0 from offset 0", open)
	}
}
