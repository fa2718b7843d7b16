package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
)

// newClient builds a kgo client from cfg plus extra options and closes it in
// t.Cleanup.
func newClient(t testing.TB, cfg kafka.Config, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts, err := cfg.Opts()
	if err != nil {
		t.Fatalf("Opts: %v", err)
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func testContext(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// readCommitted reads topic from the start with read_committed isolation
// until it has want records, failing the test on timeout. Callers end each
// topic with a known last record so that "want records" means "everything
// up to the end": anything that should be invisible (aborted transactions)
// sits before that record and would have been counted.
func readCommitted(t testing.TB, cfg kafka.Config, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, cfg,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	ctx := testContext(t, 30*time.Second)
	var got []*kgo.Record
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: got %d of %d records before %v", topic, len(got), want, err)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("read %s[%d]: %v", topic, p, err)
		})
		got = append(got, fs.Records()...)
	}
	return got
}

func values(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Value)
	}
	return out
}
