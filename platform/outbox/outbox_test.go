package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/internal/eventtest"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

var topic = kafka.EnvelopeTopic(&taskv1.TaskEvent{})

// otherSchema holds a second service's event store, for relays that share
// a topic and a transaction-id sequence.
const otherSchema = "svc_other"

// Environment of a relay run as a child process, so tests can SIGKILL it.
const (
	envChild   = "TASKMESH_TEST_RELAY_CHILD"
	envDB      = "TASKMESH_TEST_RELAY_DB"
	envBrokers = "TASKMESH_TEST_RELAY_BROKERS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(runChildRelay())
	}
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		if err := eventtest.Migrate(ctx, pool); err != nil {
			return err
		}
		return eventtest.MigrateSchema(ctx, pool, otherSchema)
	}))
}

func relayConfig(brokers []string) outbox.Config {
	return namedRelayConfig("test", brokers)
}

func namedRelayConfig(name string, brokers []string) outbox.Config {
	return outbox.Config{Name: name, Topic: topic, Partitions: 8, BatchSize: 500,
		StandbyInterval: 50 * time.Millisecond, ProduceTimeout: 5 * time.Second,
		Kafka: kafka.Config{Brokers: brokers, ClientID: "relay-test"}, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
}

func runChildRelay() int {
	ctx := context.Background()
	pool, err := pg.Open(ctx, pg.Config{URL: os.Getenv(envDB), Schema: eventtest.Schema})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child relay:", err)
		return 1
	}
	_ = outbox.New(pool, relayConfig(strings.Split(os.Getenv(envBrokers), ","))).Run(ctx)
	return 0
}

// startChild runs a relay in a child process; the returned func SIGKILLs it.
func startChild(t *testing.T, db *pgtest.DB, b *kafkatest.Broker) (kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envDB+"="+db.URL, envBrokers+"="+strings.Join(b.Addrs(), ","))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	return kill
}

func consumeAll(t *testing.T, b *kafkatest.Broker) []eventtest.Record {
	var out []eventtest.Record
	for _, r := range b.ConsumeAll(t, topic) {
		out = append(out, eventtest.Record{Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
	}
	return out
}

// waitRelayed waits until the relay checkpoint covers every event.
func waitRelayed(t *testing.T, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	waitRelayedBy(t, pool, "test", timeout)
}

// waitRelayedBy waits until the checkpoint of the named relay covers every
// event of pool's schema.
func waitRelayedBy(t *testing.T, pool *pgxpool.Pool, relay string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		var pending int64
		err := pool.QueryRow(ctx, `SELECT count(*) FROM events e WHERE NOT EXISTS (
			SELECT 1 FROM outbox_checkpoints c WHERE c.relay = $1 AND (e.tx_id, e.id) <= (c.tx_id, c.event_id))`, relay).Scan(&pending)
		if err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events still not relayed after %s", pending, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// 10,000 events from concurrent transactions reach Kafka exactly once and in
// version order per aggregate, while the active relay is SIGKILLed three
// times (a standby takes over) and the broker is down for two seconds. kcat,
// not franz-go, reads them back.
func TestRelayExactlyOnceThroughKillsAndBrokerOutage(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(8))

	relays := []func(){startChild(t, db, b), startChild(t, db, b)}
	var mu sync.Mutex
	killAt := map[int64]bool{1500: true, 4000: true, 8500: true}
	outageAt := int64(6000)
	var outage sync.WaitGroup
	w := &eventtest.Writer{Pool: pool, Aggregates: 400, Writers: 8, AfterCommit: func(total int64) {
		mu.Lock()
		defer mu.Unlock()
		for at := range killAt {
			if total >= at {
				delete(killAt, at)
				relays[0]() // kill the oldest; the standby takes over
				relays = append(relays[1:], startChild(t, db, b))
			}
		}
		if outageAt > 0 && total >= outageAt {
			outageAt = 0
			outage.Add(1)
			go func() {
				defer outage.Done()
				b.Stop()
				time.Sleep(2 * time.Second)
				b.Start()
			}()
		}
	}}
	if err := w.Write(ctx, 10_000); err != nil {
		t.Fatal(err)
	}
	outage.Wait()
	waitRelayed(t, pool, 60*time.Second)
	eventtest.CheckExactlyOnceInOrder(t, ctx, pool, consumeAll(t, b))
}

// runTestRelay runs the "test" relay on a database and a broker of its
// own until the test ends.
func runTestRelay(t *testing.T) (*pgxpool.Pool, *kafkatest.Broker, *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pool := pgtest.New(t).Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	relay := outbox.New(pool, relayConfig(b.Addrs()))
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return pool, b, relay
}

// A transaction that took a lower id but commits after a later one must not
// be skipped: the relay waits for it, then publishes both, in order.
func TestRelayWaitsForLateCommit(t *testing.T) {
	ctx := context.Background()
	pool, b, relay := runTestRelay(t)

	st := eventstore.New()
	early, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, early, eventtest.Event("early", 1)); err != nil {
		t.Fatal(err)
	}
	if err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return st.Append(ctx, tx, eventtest.Event("late", 1))
	}); err != nil {
		t.Fatal(err)
	}
	waitActive(t, relay)
	time.Sleep(300 * time.Millisecond) // many poll intervals
	if got := relay.Stats().Published; got != 0 {
		t.Fatalf("relay published %d events while an earlier transaction was open", got)
	}
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	relay.Notify()
	waitRelayed(t, pool, 10*time.Second)
	if got := relay.Stats().Published; got != 2 {
		t.Fatalf("published = %d, want 2", got)
	}
	records := b.ConsumeAll(t, topic)
	if len(records) != 2 {
		t.Fatalf("kafka holds %d records, want 2", len(records))
	}
	pos := map[string]outbox.Position{}
	for _, r := range records {
		p, err := outbox.ParsePosition(r.Headers[outbox.HeaderPosition])
		if err != nil {
			t.Fatal(err)
		}
		pos[string(r.Key)] = p
	}
	if !pos["early"].Less(pos["late"]) {
		t.Fatalf("positions: early %v, late %v", pos["early"], pos["late"])
	}
}

// runPollingRelay runs an active relay on a database of its own with the
// given polls, until the test ends.
func runPollingRelay(t *testing.T, poll, idleMax time.Duration) (*pgxpool.Pool, *outbox.Relay) {
	t.Helper()
	pool := pgtest.New(t).Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	cfg := relayConfig(b.Addrs())
	cfg.PollInterval, cfg.IdlePollMax = poll, idleMax
	relay := outbox.New(pool, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitActive(t, relay)
	return pool, relay
}

// An idle relay reads the events table less and less often, down to once
// per IdlePollMax, and still publishes a commit that nothing woke it for
// (another replica's), within about that bound.
func TestIdleRelayBacksOffAndStillSeesUnannouncedCommits(t *testing.T) {
	ctx := context.Background()
	pool, relay := runPollingRelay(t, 5*time.Millisecond, 100*time.Millisecond)

	// Polling every 5 ms would make 200 reads in a second; backing off
	// to 100 ms makes about 15 (5, 10, 20, 40, 80, then 100 ms each).
	// The bound leaves room for a slow machine, where reads only get
	// fewer.
	before := relay.Stats().Reads
	time.Sleep(time.Second)
	if reads := relay.Stats().Reads - before; reads > 40 {
		t.Fatalf("an idle relay read the events table %d times in a second, want at most 40", reads)
	}

	// No Notify: the commit is found by the poll alone.
	if err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return eventstore.New().Append(ctx, tx, eventtest.Event("unannounced", 1))
	}); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 10*time.Second)
	if got := relay.Stats().Published; got != 1 {
		t.Fatalf("published = %d, want 1", got)
	}
}

// Under a steady trickle of commits, each announced with Notify, a relay
// that has published everything it read waits for the next wake instead
// of reading again at once: about one read per Kafka transaction, not
// two, the second nearly always empty.
func TestCaughtUpRelayReadsAgainWhenWoken(t *testing.T) {
	ctx := context.Background()
	// Polls far apart: the reads counted are the ones the wakes cause.
	pool, relay := runPollingRelay(t, 2*time.Second, 2*time.Second)

	before := relay.Stats()
	const events = 40
	for i := range events {
		if err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			return eventstore.New().Append(ctx, tx, eventtest.Event(fmt.Sprint("trickle-", i), 1))
		}); err != nil {
			t.Fatal(err)
		}
		relay.Notify()
		time.Sleep(5 * time.Millisecond)
	}
	deadline := time.Now().Add(30 * time.Second)
	for relay.Stats().Published-before.Published < events {
		if time.Now().After(deadline) {
			t.Fatalf("published %d of %d events", relay.Stats().Published-before.Published, events)
		}
		time.Sleep(5 * time.Millisecond)
	}
	after := relay.Stats()
	batches, reads := after.Batches-before.Batches, after.Reads-before.Reads
	if batches < 10 {
		t.Fatalf("the %d events went out in %d Kafka transactions: not a trickle", events, batches)
	}
	// A wake that comes between a commit and the read that takes its
	// event costs one empty read; reading again after every publish costs
	// one per batch.
	if reads > batches+batches/4 {
		t.Errorf("%d reads for %d Kafka transactions, want about one each", reads, batches)
	}
}

// A transaction of another database of the same server does not hold the
// relay back, however long it stays open: it cannot write this database's
// events. One of the relay's own database still does (the test above).
func TestRelayPassesOverAnotherDatabasesTransaction(t *testing.T) {
	ctx := context.Background()
	pool, b, relay := runTestRelay(t)

	// Another database of the server (pgtest's databases share one), with
	// a transaction that took a transaction id and stays open.
	otherPool := pgtest.New(t).Open(t, eventtest.Schema)
	foreign, err := otherPool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = foreign.Rollback(context.Background()) }()
	var foreignXID string
	if err := foreign.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&foreignXID); err != nil {
		t.Fatal(err)
	}

	st := eventstore.New()
	if err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return st.Append(ctx, tx, eventtest.Event("after-the-foreign-one", 1))
	}); err != nil {
		t.Fatal(err)
	}
	// Positive control: the event's transaction came after the foreign
	// one, so the snapshot's xmin alone would hold it back.
	var held bool
	if err := pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) <= $1::text::xid8`, foreignXID).Scan(&held); err != nil || !held {
		t.Fatalf("the foreign transaction %s does not hold the server's xmin back (%v, %v)", foreignXID, held, err)
	}
	relay.Notify()
	waitRelayed(t, pool, 10*time.Second)
	if got := relay.Stats().Published; got != 1 {
		t.Fatalf("published = %d, want 1", got)
	}
	// The relay counts a record once its Kafka transaction committed; a
	// read_committed reader started at once found the topic empty in one
	// run of the whole suite on two busy cores, so an empty read is read
	// again for a while. Anything else is the answer.
	records := b.ConsumeAll(t, topic)
	for deadline := time.Now().Add(10 * time.Second); len(records) == 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		records = b.ConsumeAll(t, topic)
	}
	if len(records) != 1 || string(records[0].Key) != "after-the-foreign-one" {
		t.Fatalf("kafka holds %v, want the one event", records)
	}
}

// A relay that crashed after a Kafka commit but before its checkpoint write
// must not publish those events again: the successor finds them in Kafka.
// Deleting the checkpoint simulates losing every write of it, so the
// successor reads every partition from its start.
func TestRelaySkipsWhatKafkaAlreadyHasAfterLostCheckpoint(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	w := &eventtest.Writer{Pool: pool, Aggregates: 20, Writers: 4}

	run := func() (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = outbox.New(pool, relayConfig(b.Addrs())).Run(rctx) }()
		return func() { cancel(); <-done }
	}
	stop := run()
	if err := w.Write(ctx, 300); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 20*time.Second)
	stop()
	restoreCheckpoint(t, pool, "test", "")
	stop = run()
	defer stop()
	if err := w.Write(ctx, 100); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 20*time.Second)
	eventtest.CheckExactlyOnceInOrder(t, ctx, pool, consumeAll(t, b))
}

// Only one relay is active at a time; the others stand by.
func TestOnlyOneRelayActive(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t)
	var relays []*outbox.Relay
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		r := outbox.New(pool, relayConfig(b.Addrs()))
		relays = append(relays, r)
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		active := 0
		for _, r := range relays {
			if r.Stats().Active {
				active++
			}
		}
		if active > 1 {
			t.Fatalf("%d relays active at once", active)
		}
		if active == 1 && time.Now().After(deadline.Add(-8*time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no relay became active")
		}
		time.Sleep(20 * time.Millisecond)
	}
	w := &eventtest.Writer{Pool: pool, Aggregates: 10, Writers: 2}
	if err := w.Write(ctx, 50); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 10*time.Second)
	var total int64
	for _, r := range relays {
		total += r.Stats().Published
	}
	if total != 50 {
		t.Fatalf("relays published %d records in total, want 50", total)
	}
}

func waitActive(t *testing.T, r *outbox.Relay) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !r.Stats().Active {
		if time.Now().After(deadline) {
			t.Fatal("relay never became active")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runRelay runs a relay in this process until the returned func stops it.
func runRelay(pool *pgxpool.Pool, cfg outbox.Config) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = outbox.New(pool, cfg).Run(ctx) }()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// checkpointRow returns the relay's checkpoint row as JSON ("" when it has
// none), for restoreCheckpoint to put back.
func checkpointRow(t *testing.T, pool *pgxpool.Pool, relay string) string {
	t.Helper()
	var row string
	err := pool.QueryRow(context.Background(), `SELECT to_jsonb(c)::text FROM outbox_checkpoints c WHERE relay = $1`, relay).Scan(&row)
	if err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	return row
}

// restoreCheckpoint puts back a row read by checkpointRow: the state a
// relay leaves when it crashes and every checkpoint write since was lost.
func restoreCheckpoint(t *testing.T, pool *pgxpool.Pool, relay, row string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `DELETE FROM outbox_checkpoints WHERE relay = $1`, relay); err != nil {
		t.Fatal(err)
	}
	if row == "" {
		return
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_checkpoints SELECT * FROM jsonb_populate_record(NULL::outbox_checkpoints, $1::jsonb)`, row); err != nil {
		t.Fatal(err)
	}
}

// recordsWithKeyPrefix returns the records whose key starts with prefix.
func recordsWithKeyPrefix(records []eventtest.Record, prefix string) []eventtest.Record {
	var out []eventtest.Record
	for _, r := range records {
		if strings.HasPrefix(string(r.Key), prefix) {
			out = append(out, r)
		}
	}
	return out
}

// Two relays of two event stores in one database (so one transaction-id
// sequence) publish to one topic, as the quota service's quota and
// admission relays do: their positions interleave on every partition. A
// relay restarting from a checkpoint older than what it already committed
// to Kafka must skip exactly its own records committed since: not the
// other relay's later ones (that would lose its unpublished events) and
// not none (that would repeat them).
func TestRelaysSharingATopicLoseAndRepeatNothing(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	quota := db.Open(t, eventtest.Schema)
	admission := db.Open(t, otherSchema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	quotaCfg := namedRelayConfig("quota", b.Addrs())
	qw := &eventtest.Writer{Pool: quota, Prefix: "quota/", Aggregates: 20, Writers: 2}
	aw := &eventtest.Writer{Pool: admission, Prefix: "admission/", Aggregates: 20, Writers: 2}
	writeBoth := func(n int64) {
		t.Helper()
		errs := make(chan error, 2)
		go func() { errs <- qw.Write(ctx, n) }()
		go func() { errs <- aw.Write(ctx, n) }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}

	stopAdmission := runRelay(admission, namedRelayConfig("admission", b.Addrs()))
	defer stopAdmission()
	stopQuota := runRelay(quota, quotaCfg)
	writeBoth(200)
	waitRelayedBy(t, quota, "quota", 20*time.Second)
	waitRelayedBy(t, admission, "admission", 20*time.Second)
	early := checkpointRow(t, quota, "quota")

	writeBoth(300)
	waitRelayedBy(t, quota, "quota", 20*time.Second)
	waitRelayedBy(t, admission, "admission", 20*time.Second)
	stopQuota()
	// The quota relay "crashed" right after its Kafka commits: its
	// checkpoint is the early one, 300 of its records in Kafka are past it.
	restoreCheckpoint(t, quota, "quota", early)

	// While it is down, its store gets events, then the admission relay
	// publishes later positions to every partition.
	if err := qw.Write(ctx, 200); err != nil {
		t.Fatal(err)
	}
	if err := aw.Write(ctx, 200); err != nil {
		t.Fatal(err)
	}
	waitRelayedBy(t, admission, "admission", 20*time.Second)

	stopQuota = runRelay(quota, quotaCfg)
	defer stopQuota()
	waitRelayedBy(t, quota, "quota", 20*time.Second)
	records := consumeAll(t, b)
	eventtest.CheckExactlyOnceInOrder(t, ctx, quota, recordsWithKeyPrefix(records, "quota/"))
	eventtest.CheckExactlyOnceInOrder(t, ctx, admission, recordsWithKeyPrefix(records, "admission/"))
}

// signalHandler closes seen at the first log record whose message is msg.
type signalHandler struct {
	slog.Handler
	msg  string
	once *sync.Once
	seen chan struct{}
}

func (h signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	return h.Handler.Handle(ctx, r)
}

func (h signalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(attrs)
	return h
}

func (h signalHandler) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

// Records a relay committed may lie behind another producer's open Kafka
// transaction, where read_committed reads stop. A restarting relay waits
// for that transaction to end rather than take those records for
// unpublished and repeat them.
func TestRelayRestartWaitsForAnotherRelaysOpenTransaction(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	w := &eventtest.Writer{Pool: pool, Aggregates: 20, Writers: 2}

	stop := runRelay(pool, relayConfig(b.Addrs()))
	if err := w.Write(ctx, 100); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 20*time.Second)
	early := checkpointRow(t, pool, "test")

	opts, err := b.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	other, err := kgo.NewClient(append(opts, kgo.TransactionalID("other-relay"),
		kgo.TransactionTimeout(time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(4) {
		rec := &kgo.Record{Topic: topic, Partition: p, Key: []byte("other"), Value: []byte("open"),
			Headers: []kgo.RecordHeader{{Key: outbox.HeaderRelay, Value: []byte("other-relay")}}}
		if err := other.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// These records land behind the open transaction.
	if err := w.Write(ctx, 200); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 20*time.Second)
	stop()
	restoreCheckpoint(t, pool, "test", early)
	if err := w.Write(ctx, 50); err != nil {
		t.Fatal(err)
	}

	cfg := relayConfig(b.Addrs())
	waiting := make(chan struct{})
	cfg.Logger = slog.New(signalHandler{Handler: cfg.Logger.Handler(),
		msg: "outbox relay waits for open transactions on its topic", once: new(sync.Once), seen: waiting})
	stop = runRelay(pool, cfg)
	defer stop()
	select {
	case <-waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("the restarted relay never waited for the open transaction")
	}
	if err := other.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 20*time.Second)
	records := consumeAll(t, b)
	eventtest.CheckExactlyOnceInOrder(t, ctx, pool, recordsWithKeyPrefix(records, "task-"))
	if n := len(records) - len(recordsWithKeyPrefix(records, "task-")); n != 4 {
		t.Fatalf("kafka holds %d records of the other producer, want 4", n)
	}
}

// Routes send one aggregate type's events to a topic of its own; each
// topic holds exactly its events, in version order, also after a relay
// restarts from a checkpoint older than what it committed: with every
// row of it older (a crash and every checkpoint write since lost), and
// with only the relay's own row older, whose routed topic's row then does
// not count (its offsets would pass records to find).
func TestRelayRoutesAggregateTypesToTheirTopics(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	const routed = "test.routed.v1"
	cfg := relayConfig(b.Addrs())
	cfg.Routes = map[string]string{"group": routed}
	routedRow := "test " + routed
	next := map[string]int64{}
	appendEvents := func(agg, typ string, n int) {
		t.Helper()
		var evs []eventstore.Event
		for range n {
			next[agg]++
			e := eventtest.Event(agg, next[agg])
			e.AggregateType = typ
			evs = append(evs, e)
		}
		if err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error { return eventstore.New().Append(ctx, tx, evs...) }); err != nil {
			t.Fatal(err)
		}
	}
	stop := runRelay(pool, cfg)
	appendEvents("task-a", "task", 10)
	appendEvents("group-1", "group", 7)
	appendEvents("task-b", "task", 5)
	waitRelayed(t, pool, 20*time.Second)
	early, earlyRouted := checkpointRow(t, pool, "test"), checkpointRow(t, pool, routedRow)
	if earlyRouted == "" {
		t.Fatal("no checkpoint row for the routed topic")
	}

	appendEvents("group-1", "group", 3)
	appendEvents("task-a", "task", 2)
	waitRelayed(t, pool, 20*time.Second)
	stop()
	restoreCheckpoint(t, pool, "test", early)
	restoreCheckpoint(t, pool, routedRow, earlyRouted)

	stop = runRelay(pool, cfg)
	appendEvents("group-1", "group", 1)
	appendEvents("task-b", "task", 1)
	waitRelayed(t, pool, 20*time.Second)
	stop()
	restoreCheckpoint(t, pool, "test", early)

	stop = runRelay(pool, cfg)
	defer stop()
	appendEvents("group-1", "group", 2)
	appendEvents("task-a", "task", 1)
	waitRelayed(t, pool, 20*time.Second)

	var all []eventtest.Record
	for _, tp := range []struct {
		name, keyPrefix string
	}{{topic, "task-"}, {routed, "group-"}} {
		for _, r := range b.ConsumeAll(t, tp.name) {
			if !strings.HasPrefix(string(r.Key), tp.keyPrefix) {
				t.Fatalf("%s holds %s", tp.name, r.Key)
			}
			// Partitions are per topic; the topics' aggregates differ.
			all = append(all, eventtest.Record{Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
		}
	}
	eventtest.CheckExactlyOnceInOrder(t, ctx, pool, all)
}

// Anything that may produce to the topic can write a relay's headers.
// Records naming the relay that match none of its events — a position far
// ahead with another value, no position, an unreadable one — must not make
// a restarting relay skip events (a position ahead would hide every event
// up to it in that partition), nor stop it; its own records past a lost
// checkpoint are still found and not repeated.
func TestRelayIgnoresRecordsThatOnlyClaimToBeItsOwn(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	w := &eventtest.Writer{Pool: pool, Aggregates: 20, Writers: 2}

	stop := runRelay(pool, relayConfig(b.Addrs()))
	if err := w.Write(ctx, 100); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 20*time.Second)
	early := checkpointRow(t, pool, "test")
	if err := w.Write(ctx, 100); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 20*time.Second)
	stop()

	opts, err := b.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	forger, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	var ahead outbox.Position
	if err := pool.QueryRow(ctx, `SELECT max(tx_id)::text::bigint + 1000000, max(id) + 1000000 FROM events`).Scan(&ahead.TxID, &ahead.EventID); err != nil {
		t.Fatal(err)
	}
	for p := range int32(4) {
		for _, headers := range [][]kgo.RecordHeader{
			{{Key: outbox.HeaderPosition, Value: []byte(ahead.String())}, {Key: outbox.HeaderRelay, Value: []byte("test")}},
			{{Key: outbox.HeaderRelay, Value: []byte("test")}},
			{{Key: outbox.HeaderPosition, Value: []byte("not-a-position")}, {Key: outbox.HeaderRelay, Value: []byte("test")}},
		} {
			rec := &kgo.Record{Topic: topic, Partition: p, Key: []byte("forged"), Value: []byte("\xff not an event"), Headers: headers}
			if err := forger.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The checkpoint of before the second write: the restart must find
	// the relay's own records of that write past it.
	restoreCheckpoint(t, pool, "test", early)
	cfg := relayConfig(b.Addrs())
	warned := make(chan struct{})
	cfg.Logger = slog.New(signalHandler{Handler: cfg.Logger.Handler(),
		msg: "outbox relay ignores records that name it but are none of its events", once: new(sync.Once), seen: warned})
	stop = runRelay(pool, cfg)
	defer stop()
	if err := w.Write(ctx, 100); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, pool, 20*time.Second)
	select {
	case <-warned:
	default:
		t.Error("the relay did not say it ignored the forged records")
	}
	records := consumeAll(t, b)
	eventtest.CheckExactlyOnceInOrder(t, ctx, pool, recordsWithKeyPrefix(records, "task-"))
	if n := len(recordsWithKeyPrefix(records, "forged")); n != 12 {
		t.Fatalf("kafka holds %d forged records, want 12", n)
	}
}
