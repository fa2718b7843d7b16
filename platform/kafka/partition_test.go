package kafka_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
)

// Java's Utils.murmur2 test vectors (Kafka's UtilsTest), as signed ints:
// PartitionFor applies the same & 0x7fffffff, so checking the partition
// against a large prime pins every bit that survives the mask.
func TestPartitionForMatchesJavaMurmur2(t *testing.T) {
	vectors := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	const huge = int32(2147483647) // partitions = MaxInt32 exposes the whole masked hash
	for key, java := range vectors {
		want := (java & 0x7fffffff) % huge
		if got := kafka.PartitionFor([]byte(key), huge); got != want {
			t.Errorf("PartitionFor(%q) = %d, want %d", key, got, want)
		}
	}
}

// Producing with franz-go's default key partitioner must put each record
// where PartitionFor says.
func TestPartitionForMatchesKgo(t *testing.T) {
	b := kafkatest.New(t)
	cl := newClient(t, b.Config(), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	ctx := testContext(t, 60*time.Second)
	const topic, parts = "partitioned", int32(7)
	if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: topic, Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []*kgo.Record
	for i := range 500 {
		key := make([]byte, i%41) // lengths 0..40 cover every murmur2 tail case
		for j := range key {
			key[j] = byte(rng.UintN(256))
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: key, Value: []byte{byte(i)}})
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	seen := make(map[int32]bool)
	for _, r := range res {
		want := kafka.PartitionFor(r.Record.Key, parts)
		if r.Record.Partition != want {
			t.Fatalf("key %x: kgo chose partition %d, PartitionFor says %d", r.Record.Key, r.Record.Partition, want)
		}
		seen[r.Record.Partition] = true
	}
	if len(seen) != int(parts) {
		t.Fatalf("500 random keys hit only %d of %d partitions", len(seen), parts)
	}

	// The broker (read back by kcat, an independent client) stored each
	// record in that partition too.
	for _, r := range b.ConsumeAll(t, topic) {
		if want := kafka.PartitionFor(r.Key, parts); r.Partition != want {
			t.Fatalf("kcat read key %x from partition %d, PartitionFor says %d", r.Key, r.Partition, want)
		}
	}
}

func TestPartitionForPanicsWithoutPartitions(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("PartitionFor(key, 0) did not panic")
		}
	}()
	kafka.PartitionFor([]byte("k"), 0)
}
