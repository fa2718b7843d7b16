// Package consumer runs a Watermill Router handler over one Taskmesh topic,
// with the consumed offsets kept in Postgres in the same transaction as the
// handler's writes: the way the event consumers (usage metering, webhook
// deliveries) read the task topic
// (docs/decisions/0024-watermill-consumers.md).
//
// A Consumer is one Apply function — what a run of records means to a read
// model, inside a transaction — run live by a Watermill Router and,
// unchanged, by `taskmesh replay` into fresh tables (ReplayHandler):
//
//  1. Take the advisory lock "consumer:<name>" (leader.Run), so one replica
//     consumes while the others stand by.
//  2. Load the stored offsets (projection_offsets, the table the
//     projection runners use) and read every partition from there with
//     read_committed isolation, through a Watermill Subscriber over
//     franz-go (one Kafka client library across the code). Each Watermill
//     message is what one poll fetched, from every partition (at most
//     MaxBatch records), and one message is in flight at a time: a task's
//     events are applied in order, and the records of a burst — a relay's
//     Kafka transaction spreads its events over many partitions — share a
//     transaction.
//  3. The Router's middleware wraps the handler: a consumer span linked to
//     the producers' traces (OpenTelemetry), the correlation id, the poison
//     queue, retries with exponential backoff, and the panic recoverer.
//  4. The handler begins a transaction, locks the stored offsets of the
//     message's partitions, leaves out the records below them (applied
//     before: a redelivery, or a deposed leader that still runs), calls
//     Apply with the rest, stores each partition's offset past its last
//     record, and commits. Rows and offsets commit together, so a consumer
//     killed mid-batch neither loses nor doubles a record.
//  5. A message that still fails after the retries goes to the poison
//     queue, whose publisher applies its records one by one, each in a
//     savepoint, parks those that fail alone in projection_dead_letters
//     (projection.Park) and moves the offset past all of them, in one
//     transaction; the Router acks it and the partition goes on. A failure
//     of the database (pg.IsTransient) parks nothing: the message is
//     nacked and offered again after NackDelay.
//  6. Every RetryPoll, the leader applies the dead letters an operator asked
//     to retry (projection.RetryRequested).
//
// The stored offsets only move forward, so a handler that finds one lower
// than its tenure last committed (or read at its start) knows the database
// lost commits: Postgres dropped asynchronously committed transactions in
// a crash (step 4 commits without waiting for the WAL flush), or a backup
// was restored. The subscriber has read past them, and the handlers write
// through the pool, whose new connections do not notice the restart the
// way a single pinned connection would. Applying the next run there would
// skip the lost records for good; instead the tenure ends (ErrOffsetsLost)
// and the next one reads every partition again from what is stored.
//
// Apply must also be idempotent by itself (by event id or aggregate
// version): replays into the live tables and dead-letter retries run it on
// records whose offset is long past.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/leader"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
)

// Apply handles records, in order, inside tx. It must derive everything
// from the records (and the rows it wrote before), never from the clock,
// so a replay writes the same rows. Its statements run on keyed plans
// (pg.ReadModelTx): they must find their rows by key, as the records'
// ids do, never by scanning a table.
type Apply func(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error

// Config configures a Consumer.
type Config struct {
	// Name identifies the consumer: its offsets, its lock and its dead
	// letters.
	Name  string
	Topic string
	// Partitions is used if the consumer has to create the topic (default 16).
	Partitions int32
	Kafka      kafka.Config
	Logger     *slog.Logger
	// MaxRetries is how many times the Retry middleware runs a failing
	// handler again before the record is parked (default 3), starting
	// after RetryInitial and doubling up to RetryMax (defaults 100ms, 2s).
	MaxRetries             int
	RetryInitial, RetryMax time.Duration
	// NackDelay is the pause before a message that could be neither
	// applied nor parked is sent again (default 500ms).
	NackDelay time.Duration
	// RetryPoll is how often the leader applies dead letters an operator
	// asked to retry (default 1s).
	RetryPoll time.Duration
	// StandbyInterval is how often a standby asks for the lock (default 1s).
	StandbyInterval time.Duration
	// MaxBatch bounds the records of one message, one transaction
	// (default 500).
	MaxBatch int
	// BatchWait, if set, lets the broker hold each fetch that long to
	// gather records, so a consumer that keeps up commits at most one
	// message per BatchWait instead of one per relay transaction, and
	// its read model trails by up to BatchWait more
	// (kafka.ReadModelFetch). 0: each fetch is answered as soon as a
	// record is there.
	BatchWait time.Duration
	// AfterCommit, if set, is called with the records of each committed
	// transaction (wake-ups, metrics); it runs on the handler's goroutine.
	AfterCommit func(records []*kgo.Record)
	// OnDeadLetter, if set, is called after a record was parked.
	OnDeadLetter func(projection.DeadLetter)
}

func (c *Config) defaults() {
	if c.Partitions <= 0 {
		c.Partitions = 16
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxRetries <= 0 {
		c.MaxRetries = 3
	}
	if c.RetryInitial <= 0 {
		c.RetryInitial = 100 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 2 * time.Second
	}
	if c.NackDelay <= 0 {
		c.NackDelay = 500 * time.Millisecond
	}
	if c.RetryPoll <= 0 {
		c.RetryPoll = time.Second
	}
	if c.StandbyInterval <= 0 {
		c.StandbyInterval = time.Second
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 500
	}
}

// Consumer applies one topic to a read model through a Watermill Router.
type Consumer struct {
	pool    *pgxpool.Pool
	cfg     Config
	apply   Apply
	applied atomic.Int64
}

// New returns a consumer writing through pool, whose search_path holds the
// read model's tables, projection_offsets and projection_dead_letters
// (projection.Migrations). The pool needs two connections: the handler's
// and the lock's.
func New(pool *pgxpool.Pool, cfg Config, apply Apply) *Consumer {
	cfg.defaults()
	return &Consumer{pool: pool, cfg: cfg, apply: apply}
}

// Applied returns how many records this consumer has committed.
func (c *Consumer) Applied() int64 { return c.applied.Load() }

// Run consumes until ctx is done, as the leader among the consumer's
// replicas; it returns nil on cancellation and retries failures with
// backoff (leader.Run).
func (c *Consumer) Run(ctx context.Context) error {
	return leader.Run(ctx, c.pool, leader.Config{Lock: "consumer:" + c.cfg.Name, Role: "consumer " + c.cfg.Name,
		Standby: c.cfg.StandbyInterval, Logger: c.cfg.Logger}, c.session)
}

// session is one tenure as the leader: steps 2 to 6.
func (c *Consumer) session(parent context.Context, lock *pg.Lock) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	stored, err := storedOffsets(ctx, c.pool, c.cfg.Name, c.cfg.Topic)
	if err != nil {
		return err
	}
	sub, err := newSubscriber(ctx, c.cfg, stored)
	if err != nil {
		return err
	}
	led := newLedger(stored, cancel)
	router, err := c.router(sub, led)
	if err != nil {
		sub.Close()
		return err
	}
	routed := make(chan error, 1)
	go func() { routed <- router.Run(ctx) }()
	c.cfg.Logger.Info("consumer active", "consumer", c.cfg.Name, "topic", c.cfg.Topic)

	tick := time.NewTicker(c.cfg.RetryPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			err := errors.Join(router.Close(), <-routed)
			if parent.Err() == nil {
				// Ended from inside (lost commits): a failure, so the
				// next tenure starts after a backoff.
				return fmt.Errorf("consumer %s: %w", c.cfg.Name, errors.Join(context.Cause(ctx), err))
			}
			return err
		case err := <-routed:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("consumer %s: router stopped: %w", c.cfg.Name, errors.Join(err, sub.failure()))
		case <-tick.C:
			_, err := projection.RetryRequested(ctx, lock.Conn(), c.cfg.Name, c.retryDeadLetter, c.cfg.Logger)
			if err != nil && ctx.Err() == nil {
				cancel(err)
				<-routed
				return err
			}
		}
	}
}

// ErrOffsetsLost is the cause of a tenure ended because the stored offsets
// went back (see the package doc).
var ErrOffsetsLost = errors.New("stored offsets went back: the database lost commits; reading again from what is stored")

// ledger is what one tenure knows of its stored offsets: per partition,
// the next offset it read at its start or has committed since (a
// partition without a stored offset is not in it). The handler and the
// dead-letter retries of the session's loop read it, hence the lock.
type ledger struct {
	mu   sync.Mutex
	next map[int32]int64
	end  context.CancelCauseFunc // ends the tenure; nil outside one
}

func newLedger(stored map[int32]int64, end context.CancelCauseFunc) *ledger {
	next := make(map[int32]int64, len(stored))
	for p, o := range stored {
		next[p] = o
	}
	return &ledger{next: next, end: end}
}

// expected returns the offset the table must hold at least for p, or -1.
func (l *ledger) expected(p int32) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.next[p]; ok {
		return o
	}
	return -1
}

// committed records that the offsets of recs' partitions are stored past
// recs.
func (l *ledger) committed(recs []*kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rec := range recs {
		if o, ok := l.next[rec.Partition]; !ok || rec.Offset+1 > o {
			l.next[rec.Partition] = rec.Offset + 1
		}
	}
}

// failed ends the tenure when err says the offsets went back.
func (l *ledger) failed(err error) {
	if errors.Is(err, ErrOffsetsLost) && l.end != nil {
		l.end(err)
	}
}

// router builds the Router: one handler over sub, with the middleware of
// step 3. Middleware added first runs outermost.
func (c *Consumer) router(sub *subscriber, led *ledger) (*message.Router, error) {
	logger := watermill.NewSlogLoggerWithLevelMapping(c.cfg.Logger.With("consumer", c.cfg.Name),
		map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return nil, err
	}
	// A failure of the database, lost commits or a consumer that is
	// stopping is no reason to park a record: the message is nacked and
	// offered again (or read again by the next tenure).
	poison, err := middleware.PoisonQueueWithFilter(&deadLetterPublisher{consumer: c, ledger: led}, c.cfg.Name,
		func(err error) bool { return !pg.IsTransient(err) && !errors.Is(err, ErrOffsetsLost) })
	if err != nil {
		return nil, err
	}
	r.AddMiddleware(
		tracing(c.cfg.Name, c.cfg.Topic),
		middleware.CorrelationID,
		poison,
		middleware.Retry{MaxRetries: c.cfg.MaxRetries, InitialInterval: c.cfg.RetryInitial, MaxInterval: c.cfg.RetryMax,
			Multiplier: 2, RandomizationFactor: 0.2, Logger: logger,
			// A cancelled message context means the consumer is stopping:
			// the message is nacked and applied by the next leader.
			// Lost commits end the tenure: retrying here would not help.
			ShouldRetry: func(p middleware.RetryParams) bool {
				return !errors.Is(p.Err, context.Canceled) && !errors.Is(p.Err, ErrOffsetsLost)
			}}.Middleware,
		middleware.Recoverer,
	)
	r.AddConsumerHandler(c.cfg.Name, c.cfg.Topic, sub, func(msg *message.Message) error { return c.handle(led, msg) })
	return r, nil
}

// handle is step 4.
func (c *Consumer) handle(led *ledger, msg *message.Message) error {
	recs := recordsOf(msg)
	if len(recs) == 0 {
		return fmt.Errorf("consumer %s: message %s carries no record", c.cfg.Name, msg.UUID)
	}
	ctx := msg.Context()
	err := pg.InTx(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// Rows and offset commit together: a lost commit loses both, the
		// next handler finds the offset gone back (ledger) and the
		// records are read again, so the WAL flush need not be awaited.
		// The offsets' statements and Apply's are keyed, and run on
		// their generic plans.
		if err := pg.ReadModelTx(ctx, tx); err != nil {
			return err
		}
		fresh, err := claimOffsets(ctx, tx, c.cfg.Name, recs, led)
		if err != nil || len(fresh) == 0 {
			return err
		}
		return c.apply(ctx, tx, fresh)
	})
	if err != nil {
		led.failed(err)
		return err
	}
	led.committed(recs)
	c.applied.Add(int64(len(recs)))
	if c.cfg.AfterCommit != nil {
		c.cfg.AfterCommit(recs)
	}
	return nil
}

// retryDeadLetter applies a dead letter again; its offset is long past.
func (c *Consumer) retryDeadLetter(ctx context.Context, tx pgx.Tx, d projection.DeadLetter) error {
	return c.apply(ctx, tx, []*kgo.Record{d.Record()})
}

// claimOffsets locks the stored offsets of the records' partitions (each
// partition's records in offset order), stores them past each
// partition's last record, and returns the records at or above them
// before, in their order: those not applied yet. It fails with
// ErrOffsetsLost when a stored offset is below what the tenure knows was
// stored (led).
func claimOffsets(ctx context.Context, tx pgx.Tx, name string, recs []*kgo.Record, led *ledger) ([]*kgo.Record, error) {
	topic := recs[0].Topic
	last := map[int32]int64{}
	for _, rec := range recs {
		last[rec.Partition] = max(last[rec.Partition], rec.Offset)
	}
	partitions := slices.Sorted(maps.Keys(last))
	// Locked in partition order, the order every handler of the consumer
	// locks them in: two tenures overlapping for a moment wait, never
	// deadlock.
	rows, err := tx.Query(ctx, `SELECT partition, next_offset FROM projection_offsets
		WHERE projection = $1 AND topic = $2 AND partition = ANY($3) ORDER BY partition FOR UPDATE`, name, topic, partitions)
	if err != nil {
		return nil, fmt.Errorf("claim offsets: %w", err)
	}
	stored := map[int32]int64{}
	var (
		p int32
		o int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&p, &o}, func() error { stored[p] = o; return nil }); err != nil {
		return nil, fmt.Errorf("claim offsets: %w", err)
	}
	next := map[int32]int64{}
	for _, p := range partitions {
		s, ok := stored[p]
		if !ok {
			s = -1
		}
		if expected := led.expected(p); s < expected {
			return nil, fmt.Errorf("%w (partition %d: stored %d, committed %d)", ErrOffsetsLost, p, s, expected)
		}
		stored[p] = s
		if last[p] >= s {
			next[p] = last[p] + 1
		}
	}
	if len(next) == 0 {
		return nil, nil // all applied before
	}
	fresh := make([]*kgo.Record, 0, len(recs))
	for _, rec := range recs {
		if rec.Offset >= stored[rec.Partition] {
			fresh = append(fresh, rec)
		}
	}
	// A successor inserting a partition's first row at the same time makes
	// this fail on the key; the message is retried and finds the row.
	if err := projection.StoreOffsets(ctx, tx, name, topic, next); err != nil {
		return nil, err
	}
	return fresh, nil
}

// deadLetterPublisher is the poison queue's Publisher (step 5): it applies
// a message's records one by one, parks those that fail alone, and moves
// the offset past them all, in one transaction.
type deadLetterPublisher struct {
	consumer *Consumer
	ledger   *ledger
}

func (p *deadLetterPublisher) Publish(_ string, msgs ...*message.Message) error {
	c := p.consumer
	for _, msg := range msgs {
		recs := recordsOf(msg)
		if len(recs) == 0 {
			return fmt.Errorf("consumer %s: poisoned message %s carries no record", c.cfg.Name, msg.UUID)
		}
		var parked []projection.DeadLetter
		ctx := msg.Context()
		err := pg.InTx(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			parked = parked[:0]
			fresh, err := claimOffsets(ctx, tx, c.cfg.Name, recs, p.ledger)
			if err != nil {
				return err
			}
			for _, rec := range fresh {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				applyErr := c.safeApply(ctx, sp, []*kgo.Record{rec})
				if applyErr == nil {
					if err := sp.Commit(ctx); err != nil {
						return err
					}
					continue
				}
				_ = sp.Rollback(ctx)
				if pg.IsTransient(applyErr) {
					return applyErr
				}
				d, err := projection.Park(ctx, tx, c.cfg.Name, rec, applyErr, c.cfg.MaxRetries+1)
				if err != nil {
					return err
				}
				parked = append(parked, d)
			}
			return nil
		})
		if err != nil {
			p.ledger.failed(err)
			return err
		}
		p.ledger.committed(recs)
		for _, d := range parked {
			projection.ReportParked(c.cfg.Logger, c.cfg.OnDeadLetter, d)
		}
		c.applied.Add(int64(len(recs)))
		if c.cfg.AfterCommit != nil {
			c.cfg.AfterCommit(recs)
		}
	}
	return nil
}

func (p *deadLetterPublisher) Close() error { return nil }

// safeApply is Apply with its panic turned into an error, as the Recoverer
// does on the handler's path: the poison queue applies records outside the
// middleware.
func (c *Consumer) safeApply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic applying the record: %v", r)
		}
	}()
	return c.apply(ctx, tx, recs)
}

// ReplayHandler returns a projection.Handler that runs apply (built for the
// replay's tables) over a batch, for projection.Replay.
func ReplayHandler(apply Apply) projection.Handler {
	return projection.HandlerFunc(apply)
}
