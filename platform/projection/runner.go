// Package projection builds Postgres read models from Kafka topics.
//
// A Runner consumes every partition of its topic (or topics: one read
// model may follow several event envelopes) and hands batches of
// records to a Handler inside a transaction that also stores the consumed
// offsets, so rows and offsets always agree: a runner killed mid-batch
// leaves nothing of that batch behind and, on restart, applies it again from
// the stored offsets. Handlers guard every write with the aggregate version,
// so a record applied twice (a replay into the live tables, a duplicate) is
// a no-op.
//
// The runner loop, step by step:
//
//  1. Take the advisory lock "projection:<name>" (leader.Run; standby
//     runners wait), so one runner per projection applies records.
//  2. Load the stored offsets and consume each partition from there with
//     read_committed isolation (the outbox relay publishes transactionally).
//  3. For each polled batch, on the lock's connection: begin, Handler.Apply,
//     store the next offsets, commit. Using the lock's connection means a
//     runner whose session died cannot commit after a successor took over.
//  4. A batch that fails is tried again, MaxAttempts times in all with a
//     doubling pause. If it still fails, its records are applied one by
//     one in one transaction (a savepoint each): a record that fails alone
//     for a reason that is not transient (pg.IsTransient: the database,
//     not the record) is parked as a dead letter (see Park) with a log line
//     and a metric, the others are applied, and the offsets move past all
//     of them. So no record can stop a projection, and a database outage
//     parks nothing.
//  5. Every RetryPoll, apply the dead letters an operator asked to retry
//     (RetryRequested), on the same connection.
//  6. On any other error drop the consumer and the lock, back off, start
//     over (leader.Run).
//
// Replay rebuilds a projection from offset 0 into fresh tables and compares
// them with the live ones (see Replay).
package projection

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/leader"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// tracer is asked for at each batch, not once at start-up, so that it
// follows the tracer provider installed now (a provider set after a global
// tracer was first taken is picked up only once).
func tracer() trace.Tracer { return otel.Tracer("github.com/taskmesh/taskmesh/platform/projection") }

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the offsets table, to be applied with pg.Migrate in the
// schema that holds the projection's tables.
func Migrations() pg.MigrationSet {
	set, err := pg.LoadMigrations("projection", migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	return set
}

// Handler applies records to a read model inside tx. It must derive every
// value from the records (never from the clock or the database's state
// beyond its own rows), so a replay produces identical rows, and must skip
// records it already applied (a version guard), because replays and
// redeliveries feed it records again. Live, its statements run on keyed
// plans (pg.ReadModelTx): they must find their rows by key, never by
// scanning a table.
type Handler interface {
	Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error

// Apply calls f.
func (f HandlerFunc) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	return f(ctx, tx, records)
}

// Config configures a Runner.
type Config struct {
	// Name identifies the projection: its offsets and its lock.
	Name  string
	Topic string
	// Topics are further topics the projection follows, in the same
	// transactions as Topic's records (one handler, one lock, the offsets
	// of every topic stored together): a read model fed by several event
	// envelopes. Handlers tell records apart by kgo.Record.Topic.
	Topics []string
	// Partitions is used if the runner has to create the topic (default 16).
	Partitions int32
	// BatchSize is the most records per transaction (default 1000).
	BatchSize int
	// BatchWait, if set, lets the broker hold each fetch that long to
	// gather records, so a runner that keeps up commits at most one batch
	// per BatchWait instead of one per relay transaction, and its read
	// model trails by up to BatchWait more (kafka.ReadModelFetch). For
	// read models no request waits for; 0 (answer at once) for the others.
	BatchWait time.Duration
	// StandbyInterval is how often a standby runner retries the lock (default 1s).
	StandbyInterval time.Duration
	Kafka           kafka.Config
	Logger          *slog.Logger
	// AfterCommit, if set, is called with each committed batch (metrics,
	// live streams). It runs on the runner's goroutine: keep it short.
	AfterCommit func(records []*kgo.Record)
	// MaxAttempts is how many times a failing batch is applied before its
	// records are tried one by one and the failing ones parked (default 3).
	MaxAttempts int
	// RetryBackoff is the pause before a batch's second attempt; it
	// doubles before each further one (default 200ms).
	RetryBackoff time.Duration
	// RetryPoll is how often the runner looks for dead letters an operator
	// asked to retry (default 1s).
	RetryPoll time.Duration
	// OnDeadLetter, if set, is called after a parked record's transaction
	// committed (metrics, tests).
	OnDeadLetter func(DeadLetter)
}

// topics lists Topic and then Topics, without repeats.
func (c *Config) topics() []string { return withTopics(c.Topic, c.Topics) }

func withTopics(first string, more []string) []string {
	out := []string{first}
	for _, t := range more {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// topicPartition is one partition of one of a projection's topics.
type topicPartition struct {
	topic     string
	partition int32
}

func (c *Config) defaults() {
	if c.Partitions <= 0 {
		c.Partitions = 16
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 1000
	}
	if c.StandbyInterval <= 0 {
		c.StandbyInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 200 * time.Millisecond
	}
	if c.RetryPoll <= 0 {
		c.RetryPoll = time.Second
	}
}

// Runner applies one topic to one projection.
type Runner struct {
	pool    *pgxpool.Pool
	cfg     Config
	handler Handler

	mu      sync.Mutex
	applied int64
	offsets map[topicPartition]int64
	metrics runnerMetrics
}

// NewRunner returns a runner writing through pool (whose search_path holds
// the projection's tables and projection_offsets).
func NewRunner(pool *pgxpool.Pool, cfg Config, h Handler) *Runner {
	cfg.defaults()
	return &Runner{pool: pool, cfg: cfg, handler: h, offsets: map[topicPartition]int64{},
		metrics: newRunnerMetrics(cfg.Name, cfg.topics())}
}

// Applied returns how many records the runner has committed.
func (r *Runner) Applied() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// Run applies records until ctx is done, as the leader among the
// projection's runners (steps 1 and 4 above are leader.Run's); it returns
// nil on cancellation and retries failures with backoff.
func (r *Runner) Run(ctx context.Context) error {
	return leader.Run(ctx, r.pool, leader.Config{Lock: "projection:" + r.cfg.Name, Role: "projection runner " + r.cfg.Name,
		Standby: r.cfg.StandbyInterval, Logger: r.cfg.Logger}, func(ctx context.Context, lock *pg.Lock) error {
		err := r.session(ctx, lock)
		if err != nil && ctx.Err() == nil {
			r.metrics.errors.Add(ctx, 1, r.metrics.attrs)
		}
		return err
	})
}

// session is one tenure as the active runner: steps 2 to 5.
func (r *Runner) session(ctx context.Context, lock *pg.Lock) error {
	// Every transaction of the session runs on the lock's connection, so a
	// runner that lost the lock can no longer commit (step 3).
	conn := lock.Conn()

	// The topics may not exist yet when the projection starts before its
	// producer ever published; creating them here (Config.Partitions, the
	// same default as the relay's) lets the runner assign every partition
	// from the start instead of waiting for one to appear. Offsets live in
	// Postgres beside the rows, not in a Kafka consumer group: that is what
	// lets a batch's rows and its offsets commit in one transaction.
	topics := r.cfg.topics()
	partitions := make(map[string]int32, len(topics))
	stored := make(map[string]map[int32]int64, len(topics))
	for _, t := range topics {
		var err error
		if partitions[t], err = ensureTopic(ctx, r.cfg.Kafka, t, r.cfg.Partitions); err != nil {
			return err
		}
		if stored[t], err = loadOffsets(ctx, conn, r.cfg.Name, t); err != nil {
			return err
		}
	}
	cl, err := consumer(r.cfg.Kafka, partitions, stored, kafka.ReadModelFetch(r.cfg.BatchWait)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	r.cfg.Logger.Info("projection runner active", "projection", r.cfg.Name, "topics", fmt.Sprint(topics), "partitions", fmt.Sprint(partitions))

	retryCheck := time.Now()
	for {
		if time.Since(retryCheck) >= r.cfg.RetryPoll {
			if _, err := RetryRequested(ctx, conn, r.cfg.Name, r.retryDeadLetter, r.cfg.Logger); err != nil {
				return err
			}
			retryCheck = time.Now()
		}
		// A poll returns whatever the fetches have buffered, up to BatchSize
		// records across partitions; records of one partition come in offset
		// order, which is all a handler may rely on (one aggregate's records
		// share a partition). An idle topic must not keep the runner from
		// step 5: polls give up after RetryPoll.
		pctx, cancel := context.WithTimeout(ctx, r.cfg.RetryPoll)
		fetches := cl.PollRecords(pctx, r.cfg.BatchSize)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		// Any fetch error ends the session: the next one starts again from
		// the offsets committed in Postgres, so nothing between is lost or
		// applied twice.
		if err := fetchErr(fetches); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		records := fetches.Records()
		if len(records) == 0 {
			continue
		}
		if err := r.apply(ctx, conn, records); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// apply commits one polled batch with its offsets: steps 3 and 4.
func (r *Runner) apply(ctx context.Context, conn *pgxpool.Conn, records []*kgo.Record) error {
	// What the transaction stores: one past the highest offset of each
	// partition in the batch.
	next := nextOffsets(records)
	bctx, span := tracer().Start(ctx, "projection "+r.cfg.Name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(otel.RecordLinks(ctx, records)...),
		trace.WithAttributes(attribute.Int("messaging.batch.message_count", len(records)),
			attribute.String("messaging.destination.name", r.cfg.Topic)))
	defer span.End()
	err := r.commitBatch(bctx, conn, records, next)
	pause := r.cfg.RetryBackoff
	for attempt := 2; err != nil && attempt <= r.cfg.MaxAttempts && ctx.Err() == nil; attempt++ {
		r.cfg.Logger.Warn("projection batch failed; trying again", "projection", r.cfg.Name, "records", len(records),
			"attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause *= 2
		err = r.commitBatch(bctx, conn, records, next)
	}
	var parked []DeadLetter
	if err != nil && ctx.Err() == nil {
		parked, err = r.commitIsolated(bctx, conn, records, next)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for _, d := range parked {
		ReportParked(r.cfg.Logger, r.cfg.OnDeadLetter, d)
	}
	// Only after the commit: Applied and the offsets report what is
	// committed.
	r.mu.Lock()
	r.applied += int64(len(records))
	for topic, offsets := range next {
		for p, o := range offsets {
			r.offsets[topicPartition{topic, p}] = o
		}
	}
	r.mu.Unlock()
	r.metrics.committed(ctx, records, time.Now())
	// After the commit, never inside it: a listener must not see rows that
	// could still roll back, and a slow one must not hold the transaction
	// open.
	if r.cfg.AfterCommit != nil {
		r.cfg.AfterCommit(records)
	}
	return nil
}

// commitBatch applies records and stores next in one transaction.
func (r *Runner) commitBatch(ctx context.Context, conn *pgxpool.Conn, records []*kgo.Record, next map[string]map[int32]int64) error {
	return pg.InTx(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// No need to wait for the WAL flush: rows and offsets commit
		// together, so a crash that loses this commit loses both, and
		// the batch is applied again from Kafka. The handler's statements
		// and the offsets' are keyed, and run on their generic plans.
		if err := pg.ReadModelTx(ctx, tx); err != nil {
			return err
		}
		if err := r.handler.Apply(ctx, tx, records); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		return storeAllOffsets(ctx, tx, r.cfg.Name, next)
	})
}

// commitIsolated applies records one by one, each in a savepoint, parks
// those that fail for a reason of their own, and stores next, all in one
// transaction. A transient failure aborts it: nothing is parked for an
// outage.
func (r *Runner) commitIsolated(ctx context.Context, conn *pgxpool.Conn, records []*kgo.Record, next map[string]map[int32]int64) ([]DeadLetter, error) {
	var parked []DeadLetter
	err := pg.InTx(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
		parked = parked[:0]
		for _, rec := range records {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			applyErr := r.handler.Apply(ctx, sp, []*kgo.Record{rec})
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
			d, err := Park(ctx, tx, r.cfg.Name, rec, applyErr, r.cfg.MaxAttempts)
			if err != nil {
				return err
			}
			parked = append(parked, d)
		}
		return storeAllOffsets(ctx, tx, r.cfg.Name, next)
	})
	return parked, err
}

// retryDeadLetter applies a dead letter's record with the handler.
func (r *Runner) retryDeadLetter(ctx context.Context, tx pgx.Tx, d DeadLetter) error {
	return r.handler.Apply(ctx, tx, []*kgo.Record{d.Record()})
}

// ensureTopic creates the topic if needed and returns its partition count.
func ensureTopic(ctx context.Context, cfg kafka.Config, topic string, partitions int32) (int32, error) {
	opts, err := cfg.Opts()
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	if err := kafka.EnsureTopics(ctx, cl, kafka.TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: -1}); err != nil {
		return 0, err
	}
	return kafka.Partitions(ctx, cl, topic)
}

// consumer reads every partition of the topics (topic → partition count)
// from its stored offset (0 when none).
func consumer(cfg kafka.Config, partitions map[string]int32, stored map[string]map[int32]int64, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := cfg.Opts()
	if err != nil {
		return nil, err
	}
	// Direct partition assignment, no consumer group: one runner (the lock
	// holder) reads every partition, and a group's rebalancing would only
	// add pauses and a second source of truth for offsets.
	start := make(map[string]map[int32]kgo.Offset, len(partitions))
	for topic, n := range partitions {
		start[topic] = make(map[int32]kgo.Offset, n)
		for p := int32(0); p < n; p++ {
			start[topic][p] = kgo.NewOffset().At(stored[topic][p])
		}
	}
	opts = append(opts,
		kgo.ConsumePartitions(start),
		// Only committed records: an aborted relay transaction's records
		// must never reach a read model.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Offsets below the log start (retention) resume at the start.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	// extra sets how long a fetch waits at the broker
	// (kafka.ReadModelFetch for a live runner).
	opts = append(opts, extra...)
	return kgo.NewClient(opts...)
}

func fetchErr(fetches kgo.Fetches) error {
	var first error
	fetches.EachError(func(topic string, partition int32, err error) {
		if first == nil {
			first = fmt.Errorf("fetch %s/%d: %w", topic, partition, err)
		}
	})
	return first
}

// nextOffsets is, by topic and partition, the offset after the batch's
// last record.
func nextOffsets(records []*kgo.Record) map[string]map[int32]int64 {
	next := map[string]map[int32]int64{}
	// Within a partition offsets grow, but a poll may hold several fetches
	// of one partition; taking the maximum does not depend on their order.
	for _, rec := range records {
		if next[rec.Topic] == nil {
			next[rec.Topic] = map[int32]int64{}
		}
		if rec.Offset+1 > next[rec.Topic][rec.Partition] {
			next[rec.Topic][rec.Partition] = rec.Offset + 1
		}
	}
	return next
}

func loadOffsets(ctx context.Context, q querier, name, topic string) (map[int32]int64, error) {
	rows, err := q.Query(ctx, `SELECT partition, next_offset FROM projection_offsets
		WHERE projection = $1 AND topic = $2`, name, topic)
	if err != nil {
		return nil, fmt.Errorf("load offsets of %s: %w", name, err)
	}
	out := map[int32]int64{}
	var (
		p int32
		o int64
	)
	_, err = pgx.ForEachRow(rows, []any{&p, &o}, func() error {
		out[p] = o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load offsets of %s: %w", name, err)
	}
	return out, nil
}

// storeAllOffsets stores next (topic → partition → offset) for every topic
// of the batch.
func storeAllOffsets(ctx context.Context, tx pgx.Tx, name string, next map[string]map[int32]int64) error {
	for topic, offsets := range next {
		if err := StoreOffsets(ctx, tx, name, topic, offsets); err != nil {
			return err
		}
	}
	return nil
}

// StoreOffsets stores next (partition → the offset after the last record
// applied) as name's offsets of topic in projection_offsets, in one
// statement; a partition absent from next keeps its stored offset. The
// event consumers store theirs the same way (platform/consumer).
func StoreOffsets(ctx context.Context, tx pgx.Tx, name, topic string, next map[int32]int64) error {
	parts := make([]int32, 0, len(next))
	offs := make([]int64, 0, len(next))
	for p, o := range next {
		parts = append(parts, p)
		offs = append(offs, o)
	}
	// One statement for every partition of the batch, whatever their number;
	// a partition absent from the batch keeps its stored offset.
	_, err := tx.Exec(ctx, `
		INSERT INTO projection_offsets (projection, topic, partition, next_offset, updated_at)
		SELECT $1, $2, p, o, now() FROM unnest($3::int[], $4::bigint[]) AS x(p, o)
		ON CONFLICT (projection, topic, partition)
		DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()`,
		name, topic, parts, offs)
	if err != nil {
		return fmt.Errorf("store offsets of %s: %w", name, err)
	}
	return nil
}

// Chain applies several handlers to each batch in the same transaction:
// read models fed by the same topic share one consumer, one fetch and one
// commit (their offsets are one), and replay together.
func Chain(handlers ...Handler) Handler {
	return HandlerFunc(func(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
		for _, h := range handlers {
			if err := h.Apply(ctx, tx, records); err != nil {
				return err
			}
		}
		return nil
	})
}
