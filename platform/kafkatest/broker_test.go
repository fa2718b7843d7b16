package kafkatest_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
)

func newClient(t testing.TB, b *kafkatest.Broker, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts, err := b.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func produceValues(ctx context.Context, cl *kgo.Client, topic, prefix string, n int) error {
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}).FirstErr(); err != nil {
			return fmt.Errorf("produce %s-%d: %w", prefix, i, err)
		}
	}
	return nil
}

func kcatValues(recs []kafkatest.KcatRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func wantValues(prefixes []string, n int) []string {
	var out []string
	for _, p := range prefixes {
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%d", p, i))
		}
	}
	return out
}

// A producer connected before Stop keeps retrying through the outage and
// delivers, in order and exactly once, everything it was handed.
func TestStopStartProducerRidesOutage(t *testing.T) {
	b := kafkatest.New(t)
	addrs := b.Addrs()
	cl := newClient(t, b)
	ctx := ctxFor(t, 90*time.Second)
	const topic = "outage"
	if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := produceValues(ctx, cl, topic, "before", 5); err != nil {
		t.Fatal(err)
	}

	b.Stop()
	if c, err := net.DialTimeout("tcp", addrs[0], time.Second); err == nil {
		c.Close()
		t.Fatal("stopped broker accepts connections")
	}

	during := make(chan error, 1)
	go func() { during <- produceValues(ctx, cl, topic, "during", 5) }()
	// Give the producer time to hit the dead broker and start retrying.
	time.Sleep(1500 * time.Millisecond)
	select {
	case err := <-during:
		t.Fatalf("produce finished while the broker was down: %v", err)
	default:
	}

	b.Start()
	if !slices.Equal(b.Addrs(), addrs) {
		t.Fatalf("restarted at %v, want %v", b.Addrs(), addrs)
	}
	if err := <-during; err != nil {
		t.Fatalf("produce across the outage: %v", err)
	}
	if err := produceValues(ctx, cl, topic, "after", 5); err != nil {
		t.Fatal(err)
	}

	got := kcatValues(b.ConsumeAll(t, topic))
	if want := wantValues([]string{"before", "during", "after"}, 5); !slices.Equal(got, want) {
		t.Fatalf("read back %q, want %q", got, want)
	}
}

// A consumer group member connected before Stop resumes after Start from
// where it was, and nothing committed is lost.
func TestStopStartConsumerResumes(t *testing.T) {
	b := kafkatest.New(t)
	ctx := ctxFor(t, 90*time.Second)
	const topic = "resume"
	prod := newClient(t, b)
	if err := kafka.EnsureTopics(ctx, prod, kafka.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := produceValues(ctx, prod, topic, "a", 3); err != nil {
		t.Fatal(err)
	}
	cons := newClient(t, b, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	poll := func(n int) {
		t.Helper()
		for len(got) < n {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("poll: have %q: %v", got, ctx.Err())
			}
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
	}
	poll(3)

	b.Stop()
	time.Sleep(500 * time.Millisecond)
	b.Start()

	if err := produceValues(ctx, prod, topic, "b", 3); err != nil {
		t.Fatal(err)
	}
	poll(6)
	if want := wantValues([]string{"a", "b"}, 3); !slices.Equal(got, want) {
		t.Fatalf("consumer read %q, want %q", got, want)
	}
}

// Committed transactions survive Stop/Start; aborted ones stay invisible
// to read_committed readers (kcat here).
func TestStopStartKeepsTransactions(t *testing.T) {
	b := kafkatest.New(t)
	ctx := ctxFor(t, 60*time.Second)
	const topic = "txns"
	tx := newClient(t, b, kgo.TransactionalID("kafkatest-tx"))
	if err := kafka.EnsureTopics(ctx, tx, kafka.TopicSpec{Name: topic, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{true, false, true} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		prefix := map[bool]string{true: "commit", false: "abort"}[commit]
		for i := range 4 {
			r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
			if err := tx.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	before := b.ConsumeAll(t, topic)

	b.Stop()
	b.Start()

	after := b.ConsumeAll(t, topic)
	if len(after) != 8 {
		t.Fatalf("read %d committed records after restart, want 8: %q", len(after), kcatValues(after))
	}
	for _, r := range after {
		if strings.HasPrefix(string(r.Value), "abort") {
			t.Fatalf("aborted record visible after restart: %+v", r)
		}
	}
	if !slices.EqualFunc(before, after, func(x, y kafkatest.KcatRecord) bool {
		return x.Partition == y.Partition && x.Offset == y.Offset && string(x.Value) == string(y.Value)
	}) {
		t.Fatalf("records changed across restart:\nbefore %+v\nafter  %+v", before, after)
	}
	// The same transactional producer keeps working after the restart.
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("post-restart")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if n := len(b.ConsumeAll(t, topic)); n != 9 {
		t.Fatalf("read %d records after a post-restart transaction, want 9", n)
	}
}

func TestWithPartitions(t *testing.T) {
	b := kafkatest.New(t, kafkatest.WithPartitions(3))
	cl := newClient(t, b, kgo.AllowAutoTopicCreation())
	ctx := ctxFor(t, 30*time.Second)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if n, err := kafka.Partitions(ctx, cl, "auto"); err != nil || n != 3 {
		t.Fatalf("Partitions(auto) = %d, %v; want 3", n, err)
	}
	// Stop and Start are idempotent.
	b.Stop()
	b.Stop()
	b.Start()
	b.Start()
	if n, err := kafka.Partitions(ctx, cl, "auto"); err != nil || n != 3 {
		t.Fatalf("Partitions(auto) after restart = %d, %v; want 3", n, err)
	}
}

func TestKcatListsBroker(t *testing.T) {
	b := kafkatest.New(t)
	out := string(b.Kcat(t, "-L", "-J"))
	_, port, _ := net.SplitHostPort(b.Addrs()[0])
	if !strings.Contains(out, "127.0.0.1:"+port) {
		t.Fatalf("kcat -L output does not list the broker %s: %s", b.Addrs()[0], out)
	}
}
