package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
	MetadataTopic       = "kafka_topic"
	MetadataPartition   = "kafka_partition"
	MetadataFirstOffset = "kafka_first_offset"
	MetadataLastOffset  = "kafka_last_offset"
	MetadataRecords     = "kafka_records"
)

type recordsKey struct{}

// recordsOf returns the Kafka records a message was made from: a run of
// one partition's records in offset order. They ride in the message's
// context, which the Router's middleware keep, so the handler and the
// poison queue's publisher see the exact records (keys, headers, offsets)
// and not copies rebuilt from metadata.
func recordsOf(msg *message.Message) []*kgo.Record {
	recs, _ := msg.Context().Value(recordsKey{}).([]*kgo.Record)
	return recs
}

// Records returns the Kafka records a message of a Consumer holds.
func Records(msg *message.Message) []*kgo.Record { return recordsOf(msg) }

// queueDepth bounds the records buffered per partition; fetching a
// partition pauses above half of it and resumes below a quarter, so a
// partition whose handler retries does not hold back the others.
const queueDepth = 2048

// pollRecords is the most records one poll returns.
const pollRecords = 512

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
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: start}),
		// The relays publish in Kafka transactions.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Offsets below the log start (retention) resume at the start.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)...)
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

// poll fetches records and hands each partition's to that partition's
// sender, in offset order.
func (s *subscriber) poll(ctx context.Context, out chan<- *message.Message) {
	queues := map[int32]*partitionQueue{}
	var senders sync.WaitGroup
	defer func() {
		for _, q := range queues {
			close(q.records)
		}
		senders.Wait()
		close(out)
	}()
	for {
		fetches := s.cl.PollRecords(ctx, pollRecords)
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
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			q := queues[p.Partition]
			if q == nil {
				q = &partitionQueue{partition: p.Partition, records: make(chan *kgo.Record, queueDepth)}
				queues[p.Partition] = q
				senders.Add(1)
				go func() { defer senders.Done(); s.send(ctx, q, out) }()
			}
			for _, rec := range p.Records {
				select {
				case q.records <- rec:
				case <-ctx.Done():
					return
				}
			}
			if len(q.records) > queueDepth/2 && q.paused.CompareAndSwap(false, true) {
				s.cl.PauseFetchPartitions(map[string][]int32{s.topic: {q.partition}})
			}
		})
	}
}

type partitionQueue struct {
	partition int32
	records   chan *kgo.Record
	paused    atomic.Bool
}

// send offers one partition's records to the Router, each time all those
// queued (at most MaxBatch) as one message, and the next only once the last
// was acked. A nacked message (neither applied nor parked) is offered
// again after NackDelay.
func (s *subscriber) send(ctx context.Context, q *partitionQueue, out chan<- *message.Message) {
	for rec := range q.records {
		batch := []*kgo.Record{rec}
	more:
		for len(batch) < s.cfg.MaxBatch {
			select {
			case r, ok := <-q.records:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		if q.paused.Load() && len(q.records) < queueDepth/4 && q.paused.CompareAndSwap(true, false) {
			s.cl.ResumeFetchPartitions(map[string][]int32{s.topic: {q.partition}})
		}
		if !s.offer(ctx, batch, out) {
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

// newMessage makes the Watermill message of a run of one partition's
// records: its UUID names the run (topic/partition/first-last offsets),
// its payload is the first record's value, its metadata says where the
// run is, and its correlation id is the first record's event id.
func newMessage(ctx context.Context, recs []*kgo.Record) *message.Message {
	first, last := recs[0], recs[len(recs)-1]
	msg := message.NewMessage(fmt.Sprintf("%s/%d/%d-%d", first.Topic, first.Partition, first.Offset, last.Offset), first.Value)
	msg.Metadata.Set(MetadataTopic, first.Topic)
	msg.Metadata.Set(MetadataPartition, strconv.Itoa(int(first.Partition)))
	msg.Metadata.Set(MetadataFirstOffset, strconv.FormatInt(first.Offset, 10))
	msg.Metadata.Set(MetadataLastOffset, strconv.FormatInt(last.Offset, 10))
	msg.Metadata.Set(MetadataRecords, strconv.Itoa(len(recs)))
	if id := projection.HeaderValue(first, projection.EventIDHeader); id != "" {
		middleware.SetCorrelationID(id, msg)
	}
	msg.SetContext(context.WithValue(ctx, recordsKey{}, recs))
	return msg
}
