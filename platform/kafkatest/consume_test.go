package kafkatest_test

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
)

// ConsumeAll must return exactly the bytes franz-go produced: random binary
// keys and values (NUL, newlines, invalid UTF-8, bytes that look like the
// framing), NULL vs empty, a value larger than a pipe buffer, and headers
// whose values contain ',' and '=' as W3C tracestate does.
func TestConsumeAllRoundTripsBinary(t *testing.T) {
	b := kafkatest.New(t)
	cl := newClient(t, b)
	ctx := ctxFor(t, 60*time.Second)
	const topic = "binary"
	if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: topic, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	randBytes := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.UintN(256))
		}
		return p
	}
	recs := []*kgo.Record{
		{Key: nil, Value: nil},
		{Key: []byte{}, Value: []byte{}},
		{Key: []byte("k"), Value: []byte("0 0 -1 -1\n\n")}, // looks like a frame header
		{Key: []byte("\n\n"), Value: []byte{0, '\n', 0xff, 0xfe, '%', 's'}},
		{Key: randBytes(16), Value: randBytes(256 << 10)},
		{Key: []byte("h"), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
			{Key: "tracestate", Value: []byte("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")},
			{Key: "empty", Value: []byte{}},
		}},
	}
	for i := range 200 {
		recs = append(recs, &kgo.Record{Key: randBytes(i % 37), Value: randBytes(rng.IntN(2048))})
	}
	for _, r := range recs {
		r.Topic = topic
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := make(map[[2]int64]*kgo.Record, len(res))
	for _, pr := range res {
		want[[2]int64{int64(pr.Record.Partition), pr.Record.Offset}] = pr.Record
	}

	got := b.ConsumeAll(t, topic)
	if len(got) != len(recs) {
		t.Fatalf("ConsumeAll returned %d records, want %d", len(got), len(recs))
	}
	for i, g := range got {
		if i > 0 && (g.Partition < got[i-1].Partition || g.Partition == got[i-1].Partition && g.Offset <= got[i-1].Offset) {
			t.Fatalf("records not ordered by partition, offset at index %d", i)
		}
		w, ok := want[[2]int64{int64(g.Partition), g.Offset}]
		if !ok {
			t.Fatalf("unexpected record at %d@%d", g.Partition, g.Offset)
		}
		if !sameBytes(g.Key, w.Key) || !sameBytes(g.Value, w.Value) {
			t.Fatalf("record %d@%d differs: key %q/%q value len %d/%d (nil %v/%v)",
				g.Partition, g.Offset, g.Key, w.Key, len(g.Value), len(w.Value), g.Value == nil, w.Value == nil)
		}
		var wantHeaders map[string]string
		for _, h := range w.Headers {
			if wantHeaders == nil {
				wantHeaders = make(map[string]string)
			}
			wantHeaders[h.Key] = string(h.Value)
		}
		if !maps.Equal(g.Headers, wantHeaders) {
			t.Fatalf("record %d@%d headers = %q, want %q", g.Partition, g.Offset, g.Headers, wantHeaders)
		}
	}
}

// sameBytes is bytes.Equal that also tells NULL (nil) from empty.
func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

func TestConsumeAllEmptyTopic(t *testing.T) {
	b := kafkatest.New(t)
	cl := newClient(t, b)
	if err := kafka.EnsureTopics(ctxFor(t, 30*time.Second), cl, kafka.TopicSpec{Name: "empty", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	if got := b.ConsumeAll(t, "empty"); len(got) != 0 {
		t.Fatalf("ConsumeAll(empty) = %+v", got)
	}
}
