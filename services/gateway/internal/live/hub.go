package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/otel"
)

// ErrSlowConsumer is the reason a subscription is dropped: it fell a whole
// buffer behind the topic.
var ErrSlowConsumer = errors.New("slow consumer")

// HubConfig configures a Hub.
type HubConfig struct {
	Kafka kafka.Config
	// Topic is the task event topic.
	Topic string
	// Buffer is how many events a subscriber may have waiting; one more
	// drops it (ErrSlowConsumer).
	Buffer int
	// NewEnvelope returns an empty envelope of the topic's records
	// (default: a taskv1.TaskEvent).
	NewEnvelope func() Envelope
	Logger      *slog.Logger
}

// Hub tails the task topic and hands each event to the subscribers of its
// task. It never waits for a subscriber: a full buffer drops that
// subscriber, so a slow client costs only itself.
//
// The tail, step by step:
//
//  1. List the topic's read-committed end offsets (the last stable offset
//     of each partition: an open transaction's records lie beyond it and
//     arrive once committed). Retry with backoff while the topic does not
//     exist yet.
//  2. Consume every partition from there, read_committed, without a
//     consumer group: each gateway replica tails the topic on its own and
//     nothing is committed, a live tail needs no stored position.
//  3. Mark the tail live and ask every subscriber to resync: events
//     published before the tail started (while it was down, or before this
//     gateway started) never reach it, and the scheduler's snapshot is what
//     covers them.
//  4. For each record, look up the subscribers of its key (the task id);
//     only then decode it, and offer it to each subscriber's buffer.
//  5. On an error, drop the client, back off and start again at 1.
type Hub struct {
	cfg HubConfig
	log *slog.Logger

	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{}

	live      atomic.Bool
	delivered atomic.Int64
	dropped   atomic.Int64
}

// delivery is one event for one subscriber, with the trace context of the
// command that caused it (from the record headers).
type delivery struct {
	event Envelope
	link  trace.SpanContext
}

// task is the delivery's task event (nil on another topic's hub).
func (d delivery) task() *taskv1.TaskEvent {
	ev, _ := d.event.(*taskv1.TaskEvent)
	return ev
}

// Envelope is the event envelope of a topic a hub tails: taskv1.TaskEvent
// for the task topic, pipelinev1.JobEvent for the job topic.
type Envelope interface {
	proto.Message
	GetAggregateId() string
	GetTenantId() string
	GetVersion() int64
}

// Subscription receives the events of one task.
type Subscription struct {
	hub              *Hub
	taskID, tenantID string
	events           chan delivery
	// resync holds at most one pending "read the scheduler's snapshot
	// again" signal.
	resync  chan struct{}
	dropped chan struct{}
	err     error // set before dropped is closed
	once    sync.Once
}

// NewHub returns a hub; Run tails the topic.
func NewHub(cfg HubConfig) (*Hub, error) {
	if _, err := cfg.Kafka.Opts(); err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	if cfg.Topic == "" {
		return nil, errors.New("live: no topic")
	}
	if cfg.Buffer <= 0 {
		return nil, fmt.Errorf("live: buffer %d must be positive", cfg.Buffer)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Hub{cfg: cfg, log: cfg.Logger, subs: map[string]map[*Subscription]struct{}{}}, nil
}

// Subscribe starts receiving the events of task taskID. Events whose tenant
// is not tenantID are never delivered ("" accepts any: callers that already
// checked access). Close it when done.
func (h *Hub) Subscribe(taskID, tenantID string) *Subscription {
	s := &Subscription{hub: h, taskID: taskID, tenantID: tenantID, events: make(chan delivery, h.cfg.Buffer),
		resync: make(chan struct{}, 1), dropped: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[taskID] == nil {
		h.subs[taskID] = map[*Subscription]struct{}{}
	}
	h.subs[taskID][s] = struct{}{}
	return s
}

// Close ends the subscription; it is idempotent.
func (s *Subscription) Close() { s.hub.remove(s, nil) }

// Dropped is closed when the hub dropped the subscription; Err says why.
func (s *Subscription) Dropped() <-chan struct{} { return s.dropped }

// Err is the reason the subscription was dropped (wrapping
// ErrSlowConsumer), nil while it was not.
func (s *Subscription) Err() error {
	select {
	case <-s.dropped:
		return s.err
	default:
		return nil
	}
}

func (h *Hub) remove(s *Subscription, reason error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.subs[s.taskID]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(h.subs, s.taskID)
		}
	}
	if reason != nil {
		s.once.Do(func() {
			s.err = reason
			close(s.dropped)
		})
	}
}

// Live reports whether the tail is running from a known position.
func (h *Hub) Live() bool { return h.live.Load() }

// Subscribers returns how many subscriptions are open.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, set := range h.subs {
		n += len(set)
	}
	return n
}

// Run tails the topic until ctx is done; it returns nil then. Failures are
// logged and retried with backoff.
func (h *Hub) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		started, err := h.tail(ctx)
		h.live.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if started {
			backoff = 100 * time.Millisecond
		}
		h.log.Warn("live task tail stopped; retrying", "topic", h.cfg.Topic, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

// tail runs steps 1–4 of the loop; started reports whether it got to
// consume.
func (h *Hub) tail(ctx context.Context) (started bool, err error) {
	opts, err := h.cfg.Kafka.Opts()
	if err != nil {
		return false, err
	}
	start, err := h.endOffsets(ctx, opts)
	if err != nil {
		return false, err
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{h.cfg.Topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Records are decoded only for tasks someone watches; fetch
		// often, small batches arrive as they are published.
		kgo.FetchMaxWait(500*time.Millisecond),
	)...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	h.live.Store(true)
	h.resyncAll()
	h.log.Info("live task tail running", "topic", h.cfg.Topic, "partitions", len(start))

	var lastErr time.Time
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return true, nil
		}
		// The client reconnects and retries on its own and keeps each
		// partition's position, so an error is only logged (at most
		// every few seconds): dropping the client would lose the
		// position and force every subscriber to resync.
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || time.Since(lastErr) < 5*time.Second {
				return
			}
			lastErr = time.Now()
			h.log.Warn("live task tail: fetch failed", "topic", topic, "partition", p, "err", err)
		})
		fetches.EachRecord(h.dispatch)
	}
}

// endOffsets returns where the tail starts: each partition's last stable
// offset.
func (h *Hub) endOffsets(ctx context.Context, opts []kgo.Opt) (map[int32]kgo.Offset, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, h.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", h.cfg.Topic, err)
	}
	start := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic == h.cfg.Topic {
			start[o.Partition] = kgo.NewOffset().At(o.Offset)
		}
	})
	if len(start) == 0 {
		return nil, fmt.Errorf("topic %s does not exist yet", h.cfg.Topic)
	}
	return start, nil
}

// resyncAll asks every subscriber to read the scheduler's snapshot again.
func (h *Hub) resyncAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.subs {
		for s := range set {
			select {
			case s.resync <- struct{}{}:
			default: // one is already pending
			}
		}
	}
}

// dispatch offers a record to the subscribers of its task.
func (h *Hub) dispatch(rec *kgo.Record) {
	taskID := string(rec.Key)
	h.mu.Lock()
	n := len(h.subs[taskID])
	h.mu.Unlock()
	if n == 0 {
		return
	}
	var ev Envelope = &taskv1.TaskEvent{}
	if h.cfg.NewEnvelope != nil {
		ev = h.cfg.NewEnvelope()
	}
	if err := proto.Unmarshal(rec.Value, ev); err != nil {
		h.log.Error("live task tail: undecodable record", "partition", rec.Partition, "offset", rec.Offset, "err", err)
		return
	}
	if ev.GetAggregateId() != taskID {
		h.log.Error("live task tail: record key is not its task", "partition", rec.Partition, "offset", rec.Offset)
		return
	}
	d := delivery{event: ev, link: trace.SpanContextFromContext(otel.ExtractRecord(context.Background(), rec))}

	h.mu.Lock()
	var slow []*Subscription
	for s := range h.subs[taskID] {
		if s.tenantID != "" && s.tenantID != ev.GetTenantId() {
			continue
		}
		select {
		case s.events <- d:
			h.delivered.Add(1)
		default:
			slow = append(slow, s)
		}
	}
	h.mu.Unlock()
	for _, s := range slow {
		h.dropped.Add(1)
		h.remove(s, fmt.Errorf("%w: fell %d events behind", ErrSlowConsumer, cap(s.events)))
	}
}
