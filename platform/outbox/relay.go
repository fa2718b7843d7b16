// Package outbox publishes a service's committed events to Kafka: the relay
// half of the transactional outbox whose other half is package eventstore
// (the events table is the outbox; nothing is written twice).
//
// The relay loop, step by step:
//
//  1. Take the advisory lock "outbox:<name>" (leader.Run). Standby relays
//     wait here, so exactly one relay per service publishes.
//  2. Create a transactional producer with transactional id
//     "taskmesh-outbox-<name>" and load its producer id. This fences any
//     previous holder: its open Kafka transaction is aborted and it can never
//     commit another one.
//  3. Learn what is already in Kafka: the checkpoint in Postgres (the last
//     event published and, per partition of each of the relay's topics, a
//     Kafka offset), then the relay's own records from those offsets to the
//     end of each partition (its name is in the HeaderRelay header; other
//     relays may publish to the same topic). A crash between a Kafka commit and the checkpoint
//     write leaves records past the checkpoint; they are recognised and
//     skipped, not repeated. The checkpoint is rewritten at once, so the
//     next start reads only what is published after this one.
//  4. Repeatedly read up to BatchSize events after the cursor whose writing
//     transactions have all finished (tx_id below the snapshot's xmin, the
//     server's other databases aside), in
//     Position order; produce them in one Kafka transaction (topic by the
//     event's aggregate type, Config.Routes; key = aggregate id, partition
//     chosen like Kafka's default partitioner); commit; then store the
//     checkpoint (at most every checkpointEvery). After a read that was
//     not full, the next waits for a writer's wake (Notify) or the poll:
//     reading at once would mostly find nothing, and a commit made
//     meanwhile in this process has already woken the relay.
//  5. On any error drop the producer and the lock, back off and start over
//     at 1 (leader.Run). The cursor only moves after a Kafka commit, so
//     nothing is lost; rows are read in Position order, so one aggregate's
//     events are never reordered.
//
// Reading by "tx_id < xmin" instead of "id > last id" is what makes late
// commits safe: a transaction that got a lower id but commits after a higher
// one keeps xmin at or below its tx_id until it finishes, so the relay cannot
// move past it. Transactions of the server's other databases do not hold it
// back (readBatchSQL).
package outbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/leader"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// Record header keys the relay sets besides the event's own headers (the
// trace context).
const (
	HeaderPosition      = "taskmesh-position"
	HeaderRelay         = "taskmesh-relay"
	HeaderEventType     = "taskmesh-event-type"
	HeaderAggregateType = "taskmesh-aggregate-type"
	HeaderVersion       = "taskmesh-version"
	HeaderEventID       = "taskmesh-event-id"
	HeaderTenant        = "taskmesh-tenant"
)

// Config configures a Relay.
type Config struct {
	// Name identifies the relay: its checkpoint row, its advisory lock,
	// its Kafka transactional id and the HeaderRelay header of its
	// records. One name per events table (e.g. "scheduler"); relays
	// sharing a topic need different names.
	Name string
	// Topic receives every event whose aggregate type has no route.
	Topic string
	// Routes sends the events of some aggregate types to topics of their
	// own (aggregate type → topic): one topic per event envelope, while
	// the service keeps one event store. One relay, one order: a Kafka
	// transaction spans the topics, and each aggregate's events stay in
	// version order on its topic.
	Routes map[string]string
	// Partitions is used when the relay creates the topic (default 16).
	Partitions int32
	// BatchSize is the most events per Kafka transaction (default 1000).
	BatchSize int
	// PollInterval is how soon a relay that has just found nothing looks
	// again when it is not woken by Notify (default 10ms). Each further
	// empty read doubles the wait, up to IdlePollMax; a read that finds
	// events, or a Notify, brings it back to PollInterval.
	PollInterval time.Duration
	// IdlePollMax bounds the wait between reads of an idle relay (default
	// 100ms, never below PollInterval). Writers in the relay's process
	// wake it at once; this bound is how long an idle relay may take to
	// see the first commit of another replica, which cannot wake it
	// (docs/decisions/0114-an-idle-relay-backs-off.md).
	IdlePollMax time.Duration
	// ProduceTimeout bounds producing and committing one batch (default 15s).
	ProduceTimeout time.Duration
	// StandbyInterval is how often a standby relay retries the lock (default 1s).
	StandbyInterval time.Duration
	Kafka           kafka.Config
	Logger          *slog.Logger
}

func (c *Config) defaults() {
	if c.Partitions <= 0 {
		c.Partitions = 16
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 1000
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 10 * time.Millisecond
	}
	if c.IdlePollMax <= 0 {
		c.IdlePollMax = 100 * time.Millisecond
	}
	c.IdlePollMax = max(c.IdlePollMax, c.PollInterval)
	if c.ProduceTimeout <= 0 {
		c.ProduceTimeout = 15 * time.Second
	}
	if c.StandbyInterval <= 0 {
		c.StandbyInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Relay publishes the events table of its pool's schema to one topic.
type Relay struct {
	pool *pgxpool.Pool
	cfg  Config
	wake chan struct{}
	name []byte // the HeaderRelay value, shared by every record

	published atomic.Int64
	batches   atomic.Int64
	reads     atomic.Int64
	active    atomic.Bool
	// oldestUnrelayed is the occurred_at (Unix ns) of the first event of
	// the last read, 0 when that read found nothing: the backlog gauge.
	// It is left as it was when a session fails, so a relay that cannot
	// publish shows a growing backlog.
	oldestUnrelayed atomic.Int64
	metrics         relayMetrics

	mu     sync.Mutex
	cursor Position
}

// New returns a relay for the events table on pool's search_path.
func New(pool *pgxpool.Pool, cfg Config) *Relay {
	cfg.defaults()
	return &Relay{pool: pool, cfg: cfg, wake: make(chan struct{}, 1), name: []byte(cfg.Name), metrics: newRelayMetrics(cfg.Name)}
}

// Notify wakes the relay now instead of at its next poll; writers in the
// same process call it after committing events.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stats is a snapshot of what the relay has done since it was created.
type Stats struct {
	Published int64    // records committed to Kafka
	Batches   int64    // Kafka transactions committed
	Reads     int64    // reads of the events table, empty ones included
	Active    bool     // holds the lock and publishes
	Cursor    Position // last event read and published (or skipped as published)
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Published: r.published.Load(), Batches: r.batches.Load(), Reads: r.reads.Load(), Active: r.active.Load(),
		Cursor: r.cursor}
}

// Run relays until ctx is done, as the leader among the service's relays
// (steps 1 and 5 of the loop above are leader.Run's). It returns nil on
// cancellation; failures are logged and retried with backoff, never
// returned.
func (r *Relay) Run(ctx context.Context) error {
	defer r.observe()()
	return leader.Run(ctx, r.pool, leader.Config{Lock: "outbox:" + r.cfg.Name, Role: "outbox relay " + r.cfg.Name,
		Standby: r.cfg.StandbyInterval, Logger: r.cfg.Logger}, r.session)
}

// session is one tenure as the active relay: steps 2 to 4.
func (r *Relay) session(ctx context.Context, lock *pg.Lock) error {
	r.active.Store(true)
	defer r.active.Store(false)

	// A new producer every session: a transactional producer that failed
	// mid-transaction may not be usable again, and initialising the
	// transactional id afresh is what fences the previous holder.
	cl, err := r.producer()
	if err != nil {
		return err
	}
	defer cl.Close()

	setup, cancel := context.WithTimeout(ctx, r.cfg.ProduceTimeout)
	defer cancel()
	// Loading the producer id is what fences a previous relay.
	if _, _, err := cl.ProducerID(setup); err != nil {
		return fmt.Errorf("init producer: %w", err)
	}
	// The partition counts are read once per session and decide where every
	// aggregate's events go. Growing a topic later would move aggregates
	// to other partitions for the next session and break their order across
	// the change, so the counts are set when the topics are created and
	// never grown.
	names := r.topics()
	specs := make([]kafka.TopicSpec, len(names))
	for i, t := range names {
		specs[i] = kafka.TopicSpec{Name: t, Partitions: r.cfg.Partitions, ReplicationFactor: -1}
	}
	if err := kafka.EnsureTopics(setup, cl, specs...); err != nil {
		return err
	}
	// Reads and checkpoint writes use the lock's own connection: once the
	// session has lost the lock (its server session ended), they fail
	// instead of running beside the successor.
	conn := lock.Conn()
	// Every statement on it is keyed — the read by position, the
	// checkpoint by relay — and runs on its generic plan, made once, not
	// planned again on every poll.
	restore, err := pg.KeyedSession(setup, conn)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ProduceTimeout)
		defer cancel()
		_ = restore(ctx) // a broken session is closed by the lock's release
	}()
	cp, err := loadCheckpoint(setup, conn, r.cfg.Name, r.cfg.Topic, names)
	if err != nil {
		return err
	}
	// Only after the fence (ProducerID above): no transaction of a
	// predecessor can commit behind the records read here.
	inKafka := make(topics, len(names))
	for _, t := range names {
		partitions, err := kafka.Partitions(setup, cl, t)
		if err != nil {
			return err
		}
		k, foreign, err := scanPublished(setup, cl, r.cfg.Name, t, partitions, cp.offsets[t], cp.cursor,
			func(ctx context.Context, rec ownRecord) (bool, error) { return confirmOwn(ctx, conn, rec) }, r.cfg.Logger)
		if err != nil {
			return err
		}
		r.metrics.foreignRecords.Add(setup, int64(foreign), r.metrics.attrs)
		inKafka[t] = &topicState{partitions: partitions, published: k}
	}
	cursor := cp.cursor
	// Saving the scan's end now bounds the next start's scan to what is
	// published from here on, even if this session never checkpoints again.
	if now := inKafka.checkpoint(cursor); !maps.EqualFunc(now.offsets, cp.offsets, slices.Equal) {
		if err := saveCheckpoint(setup, conn, r.cfg.Name, r.cfg.Topic, now); err != nil {
			return err
		}
	}
	r.setCursor(cursor)
	r.cfg.Logger.Info("outbox relay active", "relay", r.cfg.Name, "topics", fmt.Sprint(names),
		"checkpoint", cursor.String(), "in_kafka", inKafka.String())

	timer := time.NewTimer(r.cfg.PollInterval)
	defer timer.Stop()
	var (
		lastSaved time.Time
		saved     = cursor
		idle      = idlePoll{min: r.cfg.PollInterval, max: r.cfg.IdlePollMax}
	)
	// Statements on the lock's connection are not cut short by a stop:
	// pgx closes a connection whose query is cancelled, which would throw
	// away the session's prepared plans and end the lock's session instead
	// of unlocking it. A stop waits for the statement under way, bounded
	// like a produce.
	onLock := func(f func(context.Context) error) error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ProduceTimeout)
		defer cancel()
		return f(sctx)
	}
	save := func(cp checkpoint) error {
		return onLock(func(sctx context.Context) error { return saveCheckpoint(sctx, conn, r.cfg.Name, r.cfg.Topic, cp) })
	}
	// await waits before the next read: until a writer in this process
	// wakes the relay (Notify) or, for the commits of other replicas,
	// which cannot wake it, the poll's wait has passed. false: ctx ended.
	await := func() bool {
		timer.Reset(idle.next())
		select {
		case <-ctx.Done():
			return false
		case <-r.wake:
			idle.reset()
		case <-timer.C:
		}
		return true
	}
	caughtUp := false
	for {
		if ctx.Err() != nil {
			return nil
		}
		// The last read was not full, so it took every event committed as
		// of its snapshot. Reading again at once, as a busy relay did,
		// found nothing nearly every time under a steady load: one
		// statement on Postgres per batch published, and a checkpoint
		// written after it as if the relay had gone idle. A commit since
		// (during the publish) has left its wake in the channel, and the
		// relay reads at once.
		if caughtUp {
			if !await() {
				return nil
			}
			caughtUp = false
		}
		// A wake left by a commit made before this read is answered by it:
		// dropped here, it does not bring about a second read, which would
		// find nothing. A commit after this point wakes the relay again.
		select {
		case <-r.wake:
		default:
		}
		// Each read runs in its own snapshot, so the xmin bound moves up as
		// the transactions that held it back finish.
		var batch []row
		if err := onLock(func(sctx context.Context) (err error) {
			batch, err = readBatch(sctx, conn, cursor, r.cfg.BatchSize)
			return err
		}); err != nil {
			return err
		}
		r.reads.Add(1)
		r.noteBacklog(batch)
		if len(batch) == 0 {
			if saved != cursor && time.Since(lastSaved) >= checkpointEvery {
				// Idle: record how far the relay got. Not at every pause
				// of a steady load, only once the checkpoint is due: the
				// backed-off polls of a relay that stays idle come to it
				// within a few tenths of a second.
				if err := save(inKafka.checkpoint(cursor)); err != nil {
					return err
				}
				saved, lastSaved = cursor, time.Now()
			}
			// The poll backs off while nothing comes: every read is a
			// statement on Postgres, and a deployment's relays are idle
			// most of the time.
			if !await() {
				return nil
			}
			continue
		}
		idle.reset()
		if err := r.publish(ctx, cl, batch, inKafka); err != nil {
			if ctx.Err() == nil {
				r.metrics.publishErrors.Add(ctx, 1, r.metrics.attrs)
			}
			return err
		}
		// The cursor moves past skipped events too: they are in Kafka
		// already.
		cursor = batch[len(batch)-1].pos
		// A checkpoint behind Kafka costs a successor only a longer scan
		// (it finds its records past the checkpoint anyway), so the relay
		// writes it at most every checkpointEvery instead of committing
		// per batch, busy or idle (above).
		if time.Since(lastSaved) >= checkpointEvery {
			if err := save(inKafka.checkpoint(cursor)); err != nil {
				return err
			}
			saved, lastSaved = cursor, time.Now()
		}
		r.setCursor(cursor)
		if caughtUp = len(batch) < r.cfg.BatchSize; caughtUp {
			r.noteBacklog(nil) // published all that was there
		}
	}
}

// topics lists the relay's topics: Topic, then the routes' in name order.
func (r *Relay) topics() []string {
	out := []string{r.cfg.Topic}
	for _, t := range slices.Sorted(maps.Values(r.cfg.Routes)) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// topicOf is where an event of aggregateType is published.
func (r *Relay) topicOf(aggregateType string) string {
	if t, ok := r.cfg.Routes[aggregateType]; ok {
		return t
	}
	return r.cfg.Topic
}

// topicState is a session's view of one of its topics.
type topicState struct {
	partitions int32
	*published
}

// topics is a session's view of each of its topics, by name.
type topics map[string]*topicState

// checkpoint is what a checkpoint at cursor stores.
func (ts topics) checkpoint(cursor Position) checkpoint {
	cp := checkpoint{cursor: cursor, offsets: make(map[string][]int64, len(ts))}
	for t, k := range ts {
		cp.offsets[t] = k.offsets(cursor)
	}
	return cp
}

func (ts topics) String() string {
	out := make(map[string]map[int32]Position, len(ts))
	for t, k := range ts {
		out[t] = k.last
	}
	return fmt.Sprint(out)
}

func (r *Relay) setCursor(p Position) {
	r.mu.Lock()
	r.cursor = p
	r.mu.Unlock()
}

func (r *Relay) producer() (*kgo.Client, error) {
	opts, err := r.cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		// One fixed transactional id per relay name: the broker lets only
		// its newest holder commit, which is the fence.
		kgo.TransactionalID("taskmesh-outbox-"+r.cfg.Name),
		// Longer than one batch's produce and commit may take, so the broker
		// never aborts a healthy transaction; a dead relay's open one is
		// aborted at this timeout, or sooner by the next session's fence.
		kgo.TransactionTimeout(2*r.cfg.ProduceTimeout),
		// The relay picks partitions itself (kafka.PartitionFor, Kafka's
		// default partitioner) so that publish, the start-up skip and
		// consumers keyed by aggregate agree on where an aggregate's events
		// are.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// No RecordDeliveryTimeout: kgo measures it from the record
		// timestamp, which is the event's time and may be long past when
		// the relay catches up. The batch context bounds delivery instead.
		kgo.ProducerLinger(0),
	)
	return kgo.NewClient(opts...)
}

// publish produces one batch in one Kafka transaction, skipping events
// whose partition already has them, and commits.
func (r *Relay) publish(ctx context.Context, cl *kgo.Client, batch []row, inKafka topics) error {
	records := make([]*kgo.Record, 0, len(batch))
	for i := range batch {
		ev := &batch[i]
		topic := r.topicOf(ev.aggregateType)
		k := inKafka[topic]
		p := kafka.PartitionFor([]byte(ev.aggregateID), k.partitions)
		if last, ok := k.last[p]; ok && !last.Less(ev.pos) {
			continue // committed by a predecessor after its last checkpoint
		}
		records = append(records, ev.record(topic, p, r.name))
	}
	if len(records) == 0 {
		return nil
	}
	// One bound for produce and commit: a broker that stops answering ends
	// the session instead of holding the lock for ever.
	pctx, cancel := context.WithTimeout(ctx, r.cfg.ProduceTimeout)
	defer cancel()
	// One Kafka transaction per batch: read_committed consumers (and the
	// start-up scan) see all of it or none, so a crash never exposes half a
	// batch.
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin kafka transaction: %w", err)
	}
	if err := cl.ProduceSync(pctx, records...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	if err := cl.EndTransaction(pctx, kgo.TryCommit); err != nil {
		// The outcome may be unknown: the next session fences this producer
		// and reads the partitions from the checkpoint's offsets, so either
		// way nothing repeats.
		return fmt.Errorf("commit kafka transaction: %w", err)
	}
	// Where this session's records went bounds the next start's scan.
	for i, rec := range records {
		inKafka[rec.Topic].committed(records[i : i+1])
	}
	r.published.Add(int64(len(records)))
	r.batches.Add(1)
	r.metrics.published.Add(ctx, int64(len(records)), r.metrics.attrs)
	return nil
}

// checkpointEvery bounds how often a busy relay writes its checkpoint.
const checkpointEvery = 200 * time.Millisecond

// row is an event as the relay reads it.
type row struct {
	pos           Position
	aggregateType string
	aggregateID   string
	version       int64
	eventType     string
	eventID       string
	tenantID      string
	occurredAt    time.Time
	payload       []byte
	headers       map[string]string
}

func (e *row) record(topic string, partition int32, relay []byte) *kgo.Record {
	rec := &kgo.Record{
		Topic:     topic,
		Partition: partition,
		Key:       []byte(e.aggregateID),
		Value:     e.payload,
		Timestamp: e.occurredAt,
	}
	// docs/events.md promises the position as the first header.
	rec.Headers = append(rec.Headers,
		kgo.RecordHeader{Key: HeaderPosition, Value: []byte(e.pos.String())},
		kgo.RecordHeader{Key: HeaderRelay, Value: relay},
		kgo.RecordHeader{Key: HeaderEventType, Value: []byte(e.eventType)},
		kgo.RecordHeader{Key: HeaderAggregateType, Value: []byte(e.aggregateType)},
		kgo.RecordHeader{Key: HeaderVersion, Value: []byte(strconv.FormatInt(e.version, 10))},
		kgo.RecordHeader{Key: HeaderEventID, Value: []byte(e.eventID)},
		kgo.RecordHeader{Key: HeaderTenant, Value: []byte(e.tenantID)},
	)
	for k, v := range e.headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return rec
}

// readBatchSQL reads the events after a position ($1 the transaction id
// as text, $2 the event id), up to $3 of them, whose writing transactions
// have all finished (readBatch).
//
// The bound is the oldest transaction of the statement's own snapshot that
// may write this table: every row below it is committed or rolled back, so
// no row can appear later below the cursor, and rows at or above it wait
// for a later read, in Position order. That is the snapshot's xmin, except
// that a transaction known to run in another database of the server is
// passed over: it cannot write this database's events, and a long one
// (another application's batch, another test's write on a shared test
// server) held every relay of the server back until it ended. A transaction is known to be another database's when
// pg_stat_activity, read after the snapshot was taken, shows it on a
// session of that database; a session never changes database. One that
// ended in between, or that has no session (a prepared transaction), is
// not known, and bounds the read as before. pg_stat_activity's backend_xid
// is the 32-bit form of the snapshot's xid8: while both run, no two
// transactions share it. With no transaction running the bound is the
// snapshot's xmax, and pg_stat_activity is not read at all
// (docs/decisions/0112-the-relay-passes-over-other-databases-transactions.md).
const readBatchSQL = `
	SELECT tx_id::text AS tx_text, id, aggregate_type, aggregate_id, version, event_type, event_id::text,
	       tenant_id, occurred_at, payload, headers
	FROM events
	WHERE (tx_id, id) > ($1::text::xid8, $2::bigint)
	  AND tx_id < coalesce(
	        (SELECT min(x) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
	         WHERE NOT EXISTS (
	           SELECT 1 FROM pg_stat_activity a
	           WHERE a.backend_xid IS NOT NULL
	             AND a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database())
	             AND a.backend_xid::text::bigint = x::text::bigint % 4294967296)),
	        pg_snapshot_xmax(pg_current_snapshot()))
	ORDER BY events.tx_id, events.id -- qualified: the xid8 column, not its text form
	LIMIT $3`

func readBatch(ctx context.Context, conn *pgxpool.Conn, after Position, limit int) ([]row, error) {
	// The row comparison (tx_id, id) > cursor lets the (tx_id, id) index
	// serve both the filter and the order; the bound is readBatchSQL's.
	rows, err := conn.Query(ctx, readBatchSQL, strconv.FormatUint(after.TxID, 10), after.EventID, limit)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var (
			e    row
			txid string
		)
		if err := rows.Scan(&txid, &e.pos.EventID, &e.aggregateType, &e.aggregateID, &e.version,
			&e.eventType, &e.eventID, &e.tenantID, &e.occurredAt, &e.payload, &e.headers); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		if e.pos.TxID, err = strconv.ParseUint(txid, 10, 64); err != nil {
			return nil, fmt.Errorf("read events: tx_id %q: %w", txid, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// confirmOwn reports whether rec, a record naming this relay found at
// start, is the relay's record of an event in the store: the event at its
// position has its event id, its key as aggregate id and its value as
// payload. Events past the checkpoint's cursor are never archived, so each
// record the relay wrote there is confirmed.
func confirmOwn(ctx context.Context, conn *pgxpool.Conn, rec ownRecord) (bool, error) {
	var (
		eventID, aggregateID string
		payload              []byte
	)
	err := conn.QueryRow(ctx, `SELECT event_id::text, aggregate_id, payload FROM events WHERE tx_id = $1::text::xid8 AND id = $2`,
		strconv.FormatUint(rec.pos.TxID, 10), rec.pos.EventID).Scan(&eventID, &aggregateID, &payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read event %s: %w", rec.pos, err)
	}
	return eventID == rec.eventID && aggregateID == rec.key && sha256.Sum256(payload) == rec.sum, nil
}

// checkpoint is how far a relay got: cursor is the last event it published
// (or found published), and offsets[topic][p] an offset of partition p of
// topic below which none of its records comes after cursor (nil or short:
// unknown, read the partition from its start).
//
// It is stored as one row per topic, written together by one statement:
// the relay's name for Topic (the row a relay without routes has) and
// "<name> <topic>" for a routed topic (a space: no topic name has one).
// Each row holds the cursor; a topic row whose cursor is not the relay
// row's (the relay row restored from a backup, say) does not count, as
// its offsets may pass records of the relay's after the relay row's cursor.
type checkpoint struct {
	cursor  Position
	offsets map[string][]int64
}

// checkpointRow is the row holding topic's offsets.
func checkpointRow(name, mainTopic, topic string) string {
	if topic == mainTopic {
		return name
	}
	return name + " " + topic
}

func loadCheckpoint(ctx context.Context, conn *pgxpool.Conn, name, mainTopic string, topics []string) (checkpoint, error) {
	keys := make([]string, len(topics))
	for i, t := range topics {
		keys[i] = checkpointRow(name, mainTopic, t)
	}
	rows, err := conn.Query(ctx, `SELECT relay, tx_id::text, event_id, kafka_offsets FROM outbox_checkpoints WHERE relay = ANY($1)`, keys)
	if err != nil {
		return checkpoint{}, fmt.Errorf("load checkpoint: %w", err)
	}
	type stored struct {
		cursor  Position
		offsets []int64
	}
	found := map[string]stored{}
	for rows.Next() {
		var (
			key, txid string
			st        stored
		)
		if err := rows.Scan(&key, &txid, &st.cursor.EventID, &st.offsets); err != nil {
			return checkpoint{}, fmt.Errorf("load checkpoint: %w", err)
		}
		if st.cursor.TxID, err = strconv.ParseUint(txid, 10, 64); err != nil {
			return checkpoint{}, fmt.Errorf("load checkpoint: %w", err)
		}
		found[key] = st
	}
	if err := rows.Err(); err != nil {
		return checkpoint{}, fmt.Errorf("load checkpoint: %w", err)
	}
	main, ok := found[name]
	if !ok {
		return checkpoint{}, nil
	}
	cp := checkpoint{cursor: main.cursor, offsets: map[string][]int64{}}
	for i, t := range topics {
		if st, ok := found[keys[i]]; ok && st.cursor == main.cursor {
			cp.offsets[t] = st.offsets
		}
	}
	return cp, nil
}

// saveCheckpoint records how far the relay got. Losing it in a crash is
// harmless: the next relay reads the partitions from the previous
// checkpoint's offsets, a longer way to the same records.
func saveCheckpoint(ctx context.Context, conn *pgxpool.Conn, name, mainTopic string, cp checkpoint) error {
	args := []any{strconv.FormatUint(cp.cursor.TxID, 10), cp.cursor.EventID}
	var values []string
	for _, t := range slices.Sorted(maps.Keys(cp.offsets)) {
		args = append(args, checkpointRow(name, mainTopic, t), cp.offsets[t])
		values = append(values, fmt.Sprintf("($%d, $1::text::xid8, $2::bigint, $%d::bigint[], now())", len(args)-1, len(args)))
	}
	_, err := conn.Exec(ctx, `
		INSERT INTO outbox_checkpoints (relay, tx_id, event_id, kafka_offsets, updated_at)
		VALUES `+strings.Join(values, ", ")+`
		ON CONFLICT (relay) DO UPDATE SET tx_id = EXCLUDED.tx_id, event_id = EXCLUDED.event_id,
			kafka_offsets = EXCLUDED.kafka_offsets, updated_at = now()`, args...)
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// idlePoll is the wait of an idle relay between reads: min after a read
// that found events, doubling with each empty read up to max.
type idlePoll struct {
	min, max time.Duration
	cur      time.Duration // the last wait; 0 before the first
}

// next is the wait before the next read, after an empty one.
func (p *idlePoll) next() time.Duration {
	p.cur = min(max(2*p.cur, p.min), p.max)
	return p.cur
}

// reset starts the next idle spell from min again.
func (p *idlePoll) reset() { p.cur = 0 }
