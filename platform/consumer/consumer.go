// Package consumer runs a Watermill Router handler over one Taskmesh topic,
// with the consumed offsets kept in Postgres in the same transaction as the
// handler's writes: the way the event consumers (usage metering, webhook
// deliveries) read the task and quota topics
// (docs/decisions/0022-watermill-consumers.md).
//
// A Consumer is one Apply function — what a record means to a read model,
// inside a transaction — run live by a Watermill Router and, unchanged, by
// `taskmesh replay` into fresh tables (Consumer.ReplayHandler):
//
//  1. Take the advisory lock "consumer:<name>" (leader.Run), so one replica
//     consumes while the others stand by.
//  2. Load the stored offsets (projection_offsets, the table the
//     projection runners use) and read every partition from there with
//     read_committed isolation, through a Watermill Subscriber over
//     franz-go (one Kafka client library across the code). Each partition
//     has one message in flight at a time, so a task's events are handled
//     in order; partitions are handled in parallel.
//  3. The Router's middleware wraps the handler: a consumer span continuing
//     the producer's trace (OpenTelemetry), the correlation id, the poison
//     queue, retries with exponential backoff, and the panic recoverer.
//  4. The handler begins a transaction, moves the partition's stored
//     offset past the record (a compare-and-set: a record at or below the
//     stored offset was applied before and is skipped), calls Apply, and
//     commits. Rows and offset commit together, so a consumer killed
//     mid-batch neither loses nor doubles a record, and a deposed leader
//     that still runs cannot apply a record its successor applied.
//  5. A record that still fails after the retries goes to the poison queue,
//     whose publisher parks it in projection_dead_letters and moves the
//     offset past it in one transaction (see projection.Park); the Router
//     acks it and the partition goes on. When even that fails (the
//     database is down), the message is nacked and sent again after a
//     pause: nothing is lost.
//  6. Every RetryPoll, the leader applies the dead letters an operator asked
//     to retry (projection.RetryRequested).
//
// Apply should also be idempotent on its own (by event id or aggregate
// version): replays into the live tables and dead-letter retries run it on
// records whose offset is long past.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// Apply handles one record inside tx. It must derive everything from the
// record (and the rows it wrote before), never from the clock, so a replay
// writes the same rows.
type Apply func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error

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
	// AfterCommit, if set, is called after a record's transaction
	// committed (wake-ups, metrics); it runs on the handler's goroutine.
	AfterCommit func(rec *kgo.Record)
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
// (projection.Migrations). The pool needs a connection per partition in
// flight plus the lock's.
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
func (c *Consumer) session(ctx context.Context, lock *pg.Lock) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := newSubscriber(ctx, c.pool, c.cfg)
	if err != nil {
		return err
	}
	router, err := c.router(sub)
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
			return errors.Join(router.Close(), <-routed)
		case err := <-routed:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("consumer %s: router stopped: %w", c.cfg.Name, errors.Join(err, sub.failure()))
		case <-tick.C:
			_, err := projection.RetryRequested(ctx, lock.Conn(), c.cfg.Name, c.retryDeadLetter, c.cfg.Logger)
			if err != nil && ctx.Err() == nil {
				cancel()
				<-routed
				return err
			}
		}
	}
}

// router builds the Router: one handler over sub, with the middleware of
// step 3. Middleware added first runs outermost.
func (c *Consumer) router(sub *subscriber) (*message.Router, error) {
	logger := watermill.NewSlogLoggerWithLevelMapping(c.cfg.Logger.With("consumer", c.cfg.Name),
		map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return nil, err
	}
	// A failure of the database or a consumer that is stopping is no
	// reason to park a record: the message is nacked and offered again.
	poison, err := middleware.PoisonQueueWithFilter(&deadLetterPublisher{consumer: c}, c.cfg.Name,
		func(err error) bool { return !pg.IsTransient(err) })
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
			ShouldRetry: func(p middleware.RetryParams) bool { return !errors.Is(p.Err, context.Canceled) }}.Middleware,
		middleware.Recoverer,
	)
	r.AddConsumerHandler(c.cfg.Name, c.cfg.Topic, sub, c.handle)
	return r, nil
}

// handle is step 4.
func (c *Consumer) handle(msg *message.Message) error {
	rec := recordOf(msg)
	if rec == nil {
		return fmt.Errorf("consumer %s: message %s carries no record", c.cfg.Name, msg.UUID)
	}
	ctx := msg.Context()
	err := pg.InTx(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// Rows and offset commit together: a lost commit loses both and
		// the record is read again, so the WAL flush need not be awaited.
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		fresh, err := claimOffset(ctx, tx, c.cfg.Name, rec)
		if err != nil || !fresh {
			return err
		}
		return c.apply(ctx, tx, rec)
	})
	if err != nil {
		return err
	}
	c.applied.Add(1)
	if c.cfg.AfterCommit != nil {
		c.cfg.AfterCommit(rec)
	}
	return nil
}

// retryDeadLetter applies a dead letter again; its offset is long past.
func (c *Consumer) retryDeadLetter(ctx context.Context, tx pgx.Tx, d projection.DeadLetter) error {
	return c.apply(ctx, tx, d.Record())
}

// claimOffset moves the stored offset of rec's partition past rec and
// reports whether it was not past it already (rec is new).
func claimOffset(ctx context.Context, tx pgx.Tx, name string, rec *kgo.Record) (bool, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO projection_offsets (projection, topic, partition, next_offset, updated_at)
		VALUES ($1, $2, $3, $4 + 1, now())
		ON CONFLICT (projection, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()
		WHERE projection_offsets.next_offset <= $4
		RETURNING 1`, name, rec.Topic, rec.Partition, rec.Offset)
	if err != nil {
		return false, fmt.Errorf("claim offset %d/%d: %w", rec.Partition, rec.Offset, err)
	}
	fresh := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("claim offset %d/%d: %w", rec.Partition, rec.Offset, err)
	}
	return fresh, nil
}

// deadLetterPublisher is the poison queue's Publisher (step 5): it parks a
// message's record and moves the offset past it in one transaction.
type deadLetterPublisher struct{ consumer *Consumer }

func (p *deadLetterPublisher) Publish(_ string, msgs ...*message.Message) error {
	c := p.consumer
	for _, msg := range msgs {
		rec := recordOf(msg)
		if rec == nil {
			return fmt.Errorf("consumer %s: poisoned message %s carries no record", c.cfg.Name, msg.UUID)
		}
		cause := errors.New(msg.Metadata.Get(middleware.ReasonForPoisonedKey))
		var parked projection.DeadLetter
		var fresh bool
		ctx := msg.Context()
		err := pg.InTx(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			var err error
			if fresh, err = claimOffset(ctx, tx, c.cfg.Name, rec); err != nil || !fresh {
				return err
			}
			parked, err = projection.Park(ctx, tx, c.cfg.Name, rec, cause, c.cfg.MaxRetries+1)
			return err
		})
		if err != nil {
			return err
		}
		if fresh {
			projection.ReportParked(c.cfg.Logger, c.cfg.OnDeadLetter, parked)
		}
	}
	return nil
}

func (p *deadLetterPublisher) Close() error { return nil }

// ReplayHandler returns a projection.Handler that runs apply (built for the
// replay's tables) over a batch, for projection.Replay.
func ReplayHandler(apply Apply) projection.Handler {
	return projection.HandlerFunc(func(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
		for _, rec := range records {
			if err := apply(ctx, tx, rec); err != nil {
				return err
			}
		}
		return nil
	})
}
