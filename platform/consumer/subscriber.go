package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/projection"
)

// Metadata keys a message carries.
const (
	MetadataTopic = "kafka_topic"
	// MetadataPartitions lists the runs of the message by partition:
	// "partition:first-last", comma-separated, in partition order.
	MetadataPartitions = "kafka_partitions"
	MetadataRecords    = "kafka_records"
)

type recordsKey struct{}

// recordsOf returns the Kafka records a message was made from: what one
// poll fetched, each partition's records in offset order. They ride in
// the message's context, which the Router's middleware keep, so the
// handler and the poison queue's publisher see the exact records (keys,
// headers, offsets) and not copies rebuilt from metadata.
func recordsOf(msg *message.Message) []*kgo.Record {
	recs, _ := msg.Context().Value(recordsKey{}).([]*kgo.Record)
	return recs
}

// Records returns the Kafka records a message of a Consumer holds.
func Records(msg *message.Message) []*kgo.Record { return recordsOf(msg) }

// subscriber is a Watermill Subscriber over franz-go that reads every
// partition of one topic from offsets stored in Postgres (step 2 of the
// package doc). It serves one Subscribe, for the session's Router.
type subscriber struct {
	cl    *kgo.Client
	cfg   Config
	topic string

	closeOnce sync.Once
	mu        sync.Mutex
	err       error // why polling stopped, if it failed
}

// newSubscriber reads every partition of cfg.Topic from its stored offset
// (partition → next offset; absent: from the start).
func newSubscriber(ctx context.Context, cfg Config, stored map[int32]int64) (*subscriber, error) {
	opts, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	err = kafka.EnsureTopics(ctx, admin, kafka.TopicSpec{Name: cfg.Topic, Partitions: cfg.Partitions, ReplicationFactor: -1})
	var partitions int32
	if err == nil {
		partitions, err = kafka.Partitions(ctx, admin, cfg.Topic)
	}
	admin.Close()
	if err != nil {
		return nil, fmt.Errorf("consumer %s: topic %s: %w", cfg.Name, cfg.Topic, err)
	}
	start := make(map[int32]kgo.Offset, partitions)
	for p := int32(0); p < partitions; p++ {
		start[p] = kgo.NewOffset().At(stored[p])
	}
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: start}),
		// The relays publish in Kafka transactions.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Offsets below the log start (retention) resume at the start.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	cl, err := kgo.NewClient(append(opts, kafka.ReadModelFetch(cfg.BatchWait)...)...)
	if err != nil {
		return nil, err
	}
	return &subscriber{cl: cl, cfg: cfg, topic: cfg.Topic}, nil
}

func storedOffsets(ctx context.Context, pool *pgxpool.Pool, name, topic string) (map[int32]int64, error) {
	rows, err := pool.Query(ctx, `SELECT partition, next_offset FROM projection_offsets WHERE projection = $1 AND topic = $2`,
		name, topic)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: load offsets: %w", name, err)
	}
	out := map[int32]int64{}
	var (
		p int32
		o int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&p, &o}, func() error { out[p] = o; return nil }); err != nil {
		return nil, fmt.Errorf("consumer %s: load offsets: %w", name, err)
	}
	return out, nil
}

// Subscribe starts reading; the channel closes when ctx is done or polling
// fails (failure says why).
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if topic != s.topic {
		return nil, fmt.Errorf("consumer %s: subscriber reads %s, not %s", s.cfg.Name, s.topic, topic)
	}
	out := make(chan *message.Message)
	go s.poll(ctx, out)
	return out, nil
}

// Close closes the Kafka client.
func (s *subscriber) Close() error {
	s.closeOnce.Do(s.cl.Close)
	return nil
}

func (s *subscriber) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *subscriber) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// poll fetches records and offers them to the Router as one message —
// every partition's records of the poll, at most MaxBatch, each
// partition's in offset order — and polls again only once it was acked.
// One message in flight keeps each task's events in order, and makes a
// burst spread over many partitions (a relay's Kafka transaction) one
// transaction of the handler, not one per partition.
func (s *subscriber) poll(ctx context.Context, out chan<- *message.Message) {
	defer close(out)
	for {
		fetches := s.cl.PollRecords(ctx, s.cfg.MaxBatch)
		if ctx.Err() != nil {
			return
		}
		var failed error
		fetches.EachError(func(topic string, partition int32, err error) {
			if failed == nil && !errors.Is(err, context.Canceled) {
				failed = fmt.Errorf("fetch %s/%d: %w", topic, partition, err)
			}
		})
		if failed != nil {
			s.fail(failed)
			return
		}
		if batch := fetches.Records(); len(batch) > 0 && !s.offer(ctx, batch, out) {
			return
		}
	}
}

// offer hands batch to the Router until it is acked; false when ctx ended.
func (s *subscriber) offer(ctx context.Context, batch []*kgo.Record, out chan<- *message.Message) bool {
	for {
		msg := newMessage(ctx, batch)
		select {
		case out <- msg:
		case <-ctx.Done():
			return false
		}
		select {
		case <-msg.Acked():
			return true
		case <-msg.Nacked():
			select {
			case <-time.After(s.cfg.NackDelay):
			case <-ctx.Done():
				return false
			}
		case <-ctx.Done():
			return false
		}
	}
}

// newMessage makes the Watermill message of a poll's records: its UUID
// names them (topic and each partition's first and last offsets), its
// payload is the first record's value, its metadata says where they are,
// and its correlation id is the first record's event id.
func newMessage(ctx context.Context, recs []*kgo.Record) *message.Message {
	type run struct{ first, last int64 }
	runs := map[int32]*run{}
	for _, rec := range recs {
		if r := runs[rec.Partition]; r == nil {
			runs[rec.Partition] = &run{rec.Offset, rec.Offset}
		} else {
			r.last = rec.Offset
		}
	}
	parts := make([]string, 0, len(runs))
	for _, p := range slices.Sorted(maps.Keys(runs)) {
		parts = append(parts, fmt.Sprintf("%d:%d-%d", p, runs[p].first, runs[p].last))
	}
	where := strings.Join(parts, ",")
	msg := message.NewMessage(recs[0].Topic+"/"+where, recs[0].Value)
	msg.Metadata.Set(MetadataTopic, recs[0].Topic)
	msg.Metadata.Set(MetadataPartitions, where)
	msg.Metadata.Set(MetadataRecords, strconv.Itoa(len(recs)))
	if id := projection.HeaderValue(recs[0], projection.EventIDHeader); id != "" {
		middleware.SetCorrelationID(id, msg)
	}
	msg.SetContext(context.WithValue(ctx, recordsKey{}, recs))
	return msg
}
