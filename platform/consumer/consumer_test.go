package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/projection"
)

const (
	schema = "consumertest"
	topic  = "taskmesh.test.events.v1"
)

var tables = pg.MigrationSet{Component: "test", Migrations: []pg.Migration{{Version: 1, Name: "counts", SQL: `
	-- applied counts every application of a task's events (no guard), so
	-- a record applied twice shows; last is the last version seen, so an
	-- event applied out of order shows.
	CREATE TABLE counts (
		task_id  text PRIMARY KEY,
		applied  int    NOT NULL,
		last     bigint NOT NULL,
		disorder int    NOT NULL DEFAULT 0
	)`}}}

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, schema, projection.Migrations(), tables)
	}))
}

// counter is the Apply under test. Messages "poison" fail for good and
// "panic" panic, until fixed; transient fails every call with a
// connection error while above zero.
type counter struct {
	fixed     atomic.Bool
	transient atomic.Int32
	delay     time.Duration
}

func (c *counter) apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	if c.transient.Load() > 0 {
		c.transient.Add(-1)
		return &pgconn.PgError{Code: "08006", Message: "connection failure"}
	}
	for _, rec := range recs {
		var env taskv1.TaskEvent
		if err := proto.Unmarshal(rec.Value, &env); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		switch msg := env.GetProgressed().GetMessage(); {
		case msg == "poison" && !c.fixed.Load():
			return errors.New("cannot apply a poison record")
		case msg == "panic" && !c.fixed.Load():
			panic("handler bug")
		}
		time.Sleep(c.delay)
		if _, err := tx.Exec(ctx, `INSERT INTO counts (task_id, applied, last) VALUES ($1, 1, $2)
			ON CONFLICT (task_id) DO UPDATE SET applied = counts.applied + 1, last = EXCLUDED.last,
				disorder = counts.disorder + CASE WHEN EXCLUDED.last <= counts.last THEN 1 ELSE 0 END`,
			env.GetAggregateId(), env.GetVersion()); err != nil {
			return err
		}
	}
	return nil
}

func record(t testing.TB, task string, v int64, msg string) *kgo.Record {
	t.Helper()
	b, err := proto.Marshal(&taskv1.TaskEvent{EventId: fmt.Sprintf("ev-%s-%d", task, v), AggregateId: task, Version: v,
		Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{Message: msg}}})
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(task), Value: b,
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte(fmt.Sprintf("ev-%s-%d", task, v))},
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
}

func produce(t *testing.T, b *kafkatest.Broker, recs []*kgo.Record) {
	t.Helper()
	if err := send(b, recs); err != nil {
		t.Fatal(err)
	}
}

func send(b *kafkatest.Broker, recs []*kgo.Record) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// okRecords is versions rounds of one record for each of tasks tasks
// ("task-00", …), versions 1 to versions in order.
func okRecords(t testing.TB, tasks int, versions int64) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for v := int64(1); v <= versions; v++ {
		for i := range tasks {
			recs = append(recs, record(t, fmt.Sprintf("task-%02d", i), v, "ok"))
		}
	}
	return recs
}

type counts struct{ applied, last, disorder int64 }

func read(t *testing.T, pool *pgxpool.Pool) map[string]counts {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT task_id, applied, last, disorder FROM counts`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]counts{}
	var id string
	var c counts
	if _, err := pgx.ForEachRow(rows, []any{&id, &c.applied, &c.last, &c.disorder}, func() error { out[id] = c; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func config(b *kafkatest.Broker) Config {
	return Config{Name: "counter", Topic: topic, Partitions: 4, Kafka: kafka.Config{Brokers: b.Addrs()}, MaxRetries: 2,
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, NackDelay: 10 * time.Millisecond,
		RetryPoll: 50 * time.Millisecond, StandbyInterval: 50 * time.Millisecond}
}

// running runs c until the returned stop is called.
func running(c *Consumer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// Records are applied exactly once and in order per task although the
// consumer is stopped and started again and again mid-stream; a record
// that fails for good and one whose handler panics are parked and the
// rest go on; retried after the fix, both are applied.
func TestConsumerAppliesEachRecordOnceAndParksPoison(t *testing.T) {
	pool := pgtest.New(t).Open(t, schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	var recs []*kgo.Record
	const tasks, versions = 40, 25
	for v := int64(1); v <= versions; v++ {
		for i := range tasks {
			msg := "ok"
			switch {
			case i == 3 && v == 5:
				msg = "poison"
			case i == 7 && v == 9:
				msg = "panic"
			}
			recs = append(recs, record(t, fmt.Sprintf("task-%02d", i), v, msg))
		}
	}
	fn := &counter{delay: 200 * time.Microsecond}
	var parked sync.Map
	cfg := config(b)
	cfg.OnDeadLetter = func(d projection.DeadLetter) { parked.Store(d.EventID, d) }
	var committed atomic.Int64
	cfg.AfterCommit = func(recs []*kgo.Record) { committed.Add(int64(len(recs))) }
	c := New(pool, cfg, fn.apply)
	stop := running(c)
	sent := make(chan error, 1)
	go func() { sent <- send(b, recs) }()
	for range 4 {
		target := committed.Load() + 150
		eventually(t, "progress", func() bool { return committed.Load() >= target || committed.Load() >= int64(len(recs))-2 })
		stop()
		stop = running(New(pool, cfg, fn.apply))
	}
	defer func() { stop() }()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	eventually(t, "every good record", func() bool {
		got := read(t, pool)
		if len(got) != tasks {
			return false
		}
		for _, c := range got {
			if c.last != versions {
				return false
			}
		}
		return true
	})
	for id, c := range read(t, pool) {
		want := int64(versions)
		if id == "task-03" || id == "task-07" {
			want--
		}
		if c.applied != want || c.disorder != 0 {
			t.Errorf("%s: applied %d times (want %d), %d out of order", id, c.applied, want, c.disorder)
		}
	}
	var ids []int64
	for _, ev := range []string{"ev-task-03-5", "ev-task-07-9"} {
		v, ok := parked.Load(ev)
		if !ok {
			t.Fatalf("%s was not parked", ev)
		}
		d := v.(projection.DeadLetter)
		if d.Attempts != 3 || d.Projection != "counter" || d.Topic != topic {
			t.Errorf("dead letter %+v", d)
		}
		ids = append(ids, d.ID)
	}
	if d, _ := parked.Load("ev-task-07-9"); !strings.Contains(d.(projection.DeadLetter).Error, "panic") {
		t.Errorf("the panic's dead letter says %q", d.(projection.DeadLetter).Error)
	}

	fn.fixed.Store(true)
	for _, id := range ids {
		if _, err := projection.RequestRetry(context.Background(), pool, id); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the retried dead letters", func() bool {
		left, err := projection.ListDeadLetters(context.Background(), pool, projection.DeadLetterFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(left) == 0
	})
	if got := read(t, pool); got["task-03"].applied != versions || got["task-07"].applied != versions {
		t.Errorf("after the retries: task-03 %+v, task-07 %+v", got["task-03"], got["task-07"])
	}
}

// A record handed to the handler again (a redelivery: the broker or the
// subscriber offering it twice) is skipped: its offset is already past.
func TestRedeliveredRecordIsSkipped(t *testing.T) {
	pool := pgtest.New(t).Open(t, schema)
	fn := &counter{}
	c := New(pool, Config{Name: "counter", Topic: topic}, fn.apply)
	rec := record(t, "task-1", 1, "ok")
	rec.Partition, rec.Offset = 2, 41
	for range 3 {
		if err := c.handle(newLedger(nil, nil), newMessage(context.Background(), []*kgo.Record{rec})); err != nil {
			t.Fatal(err)
		}
	}
	older := record(t, "task-1", 0, "ok")
	older.Partition, older.Offset = 2, 40
	if err := c.handle(newLedger(nil, nil), newMessage(context.Background(), []*kgo.Record{older})); err != nil {
		t.Fatal(err)
	}
	// A run that overlaps what was applied applies only its new records.
	next := record(t, "task-1", 2, "ok")
	next.Partition, next.Offset = 2, 42
	if err := c.handle(newLedger(nil, nil), newMessage(context.Background(), []*kgo.Record{rec, next})); err != nil {
		t.Fatal(err)
	}
	if got := read(t, pool)["task-1"]; got.applied != 2 || got.last != 2 || c.Applied() != 6 {
		t.Errorf("after 3 deliveries, an older record and an overlapping run: %+v (handled %d)", got, c.Applied())
	}
	if err := c.handle(newLedger(nil, nil), message.NewMessage("no-record", nil)); err == nil {
		t.Error("a message without a record was handled")
	}
}

// Commits the database lost after acknowledging them (an asynchronous
// commit dropped in a crash, a restored backup) are applied again: the
// next run finds the stored offset gone back, the tenure ends and the next
// one reads the partition from what is stored. Without that, the run
// would be applied on top and the lost records skipped for good.
func TestLostCommitsAreReadAgain(t *testing.T) {
	pool := pgtest.New(t).Open(t, schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(1))
	cfg := config(b)
	cfg.Partitions = 1
	fn := &counter{}
	c := New(pool, cfg, fn.apply)
	stop := running(c)
	defer stop()
	var first []*kgo.Record
	for v := int64(1); v <= 5; v++ {
		first = append(first, record(t, "task-1", v, "ok"))
	}
	produce(t, b, first)
	eventually(t, "the first records", func() bool { return read(t, pool)["task-1"].applied == 5 })

	// What Postgres holds after losing the commits: neither the rows nor
	// the offsets they moved.
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `DELETE FROM counts`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE projection_offsets SET next_offset = 0 WHERE projection = $1`, cfg.Name); err != nil {
		t.Fatal(err)
	}
	var second []*kgo.Record
	for v := int64(6); v <= 8; v++ {
		second = append(second, record(t, "task-1", v, "ok"))
	}
	produce(t, b, second)
	eventually(t, "every record after the loss", func() bool { return read(t, pool)["task-1"].last == 8 })
	if got := read(t, pool)["task-1"]; got.applied != 8 || got.disorder != 0 {
		t.Errorf("after lost commits: applied %d times (want 8), %d out of order", got.applied, got.disorder)
	}
}

// A failure of the database parks nothing: the message is offered again
// until it applies.
func TestTransientFailuresAreNotParked(t *testing.T) {
	pool := pgtest.New(t).Open(t, schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(1))
	fn := &counter{}
	fn.transient.Store(10) // beyond the retries of several deliveries
	cfg := config(b)
	cfg.Partitions = 1
	var parked atomic.Int32
	cfg.OnDeadLetter = func(projection.DeadLetter) { parked.Add(1) }
	stop := running(New(pool, cfg, fn.apply))
	defer stop()
	produce(t, b, []*kgo.Record{record(t, "task-1", 1, "ok"), record(t, "task-1", 2, "ok")})
	eventually(t, "both records", func() bool { return read(t, pool)["task-1"].applied == 2 })
	if parked.Load() != 0 || fn.transient.Load() != 0 {
		t.Errorf("parked %d records during an outage", parked.Load())
	}
}

// The replay handler runs the same Apply over a batch: a replay equals the
// live table.
func TestReplayEqualsLive(t *testing.T) {
	pool := pgtest.New(t).Open(t, schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	recs := okRecords(t, 10, 5)
	produce(t, b, recs)
	fn := &counter{}
	cfg := config(b)
	c := New(pool, cfg, fn.apply)
	stop := running(c)
	defer stop()
	eventually(t, "all records", func() bool { return c.Applied() == int64(len(recs)) })
	report, err := projection.Replay(context.Background(), pool, projection.ReplaySpec{Name: "counter", Topic: topic,
		Tables: []string{"counts"}, Kafka: cfg.Kafka, NewHandler: func(m map[string]string) projection.Handler {
			t := pgx.Identifier{m["counts"]}.Sanitize()
			return ReplayHandler(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
				for _, rec := range recs {
					var env taskv1.TaskEvent
					if err := proto.Unmarshal(rec.Value, &env); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `INSERT INTO `+t+` (task_id, applied, last) VALUES ($1, 1, $2)
						ON CONFLICT (task_id) DO UPDATE SET applied = `+t+`.applied + 1, last = EXCLUDED.last`,
						env.GetAggregateId(), env.GetVersion()); err != nil {
						return err
					}
				}
				return nil
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !report.Equal() || report.Records != int64(len(recs)) {
		t.Fatalf("replay = %+v", report)
	}
}

// A consumer's transactions run on generic plans that read indexes: the
// lock and the upsert of its offsets and Apply's statements
// (pg.ReadModelTx).
func TestConsumerRunsOnKeyedPlans(t *testing.T) {
	pool := pgtest.New(t).Open(t, schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	recs := okRecords(t, 20, 10)
	fn := &counter{}
	stop := running(New(pool, config(b), fn.apply))
	produce(t, b, recs)
	eventually(t, "every record", func() bool {
		got := read(t, pool)
		for i := range 20 {
			if got[fmt.Sprintf("task-%02d", i)].last != 10 {
				return false
			}
		}
		return true
	})
	stop()
	pgtest.CheckKeyedPlans(t, context.Background(), pool, "after the consumer", []string{
		"SELECT partition, next_offset FROM projection_offsets WHERE projection = $1 AND topic = $2 AND partition = ANY", // the offsets' lock
		"INSERT INTO projection_offsets", // their upsert
		"INSERT INTO counts",             // Apply's write
	})
}

// What one poll fetches is one transaction, whatever partitions it spans:
// records waiting on all four partitions when the consumer starts are
// applied in fewer commits than there are partitions, each record once.
func TestOnePollIsOneTransaction(t *testing.T) {
	pool := pgtest.New(t).Open(t, schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	recs := okRecords(t, 40, 5)
	produce(t, b, recs)
	partitions := map[int32]bool{}
	for _, rec := range recs {
		partitions[rec.Partition] = true
	}
	if len(partitions) != 4 {
		t.Fatalf("the records went to %d partitions, want 4", len(partitions))
	}
	cfg := config(b)
	var commits, committed atomic.Int64
	cfg.AfterCommit = func(recs []*kgo.Record) { commits.Add(1); committed.Add(int64(len(recs))) }
	stop := running(New(pool, cfg, (&counter{}).apply))
	defer stop()
	eventually(t, "every record", func() bool { return committed.Load() == int64(len(recs)) })
	if n := commits.Load(); n >= 4 {
		t.Errorf("%d records on 4 partitions took %d commits, want fewer than one per partition", len(recs), n)
	}
	for id, c := range read(t, pool) {
		if c.applied != 5 || c.disorder != 0 {
			t.Errorf("%s: applied %d times (want 5), %d out of order", id, c.applied, c.disorder)
		}
	}
}

// Records that come one Kafka transaction at a time, as a relay under a
// light load publishes them, are one transaction each when every fetch is
// answered at once, and gathered into a few with BatchWait.
func TestBatchWaitGathersATrickleOfRecords(t *testing.T) {
	trickle := func(t *testing.T, wait time.Duration) (commits int64) {
		pool := pgtest.New(t).Open(t, schema)
		b := kafkatest.New(t, kafkatest.WithPartitions(4))
		cfg := config(b)
		cfg.BatchWait = wait
		var n, committed atomic.Int64
		cfg.AfterCommit = func(recs []*kgo.Record) { n.Add(1); committed.Add(int64(len(recs))) }
		produce(t, b, okRecords(t, 1, 1)) // the topic exists before the consumer starts
		stop := running(New(pool, cfg, (&counter{}).apply))
		defer stop()
		eventually(t, "the first record", func() bool { return committed.Load() == 1 })
		n.Store(0)
		const records = 20
		for v := int64(2); v <= records+1; v++ {
			produce(t, b, []*kgo.Record{record(t, "task-00", v, "ok")})
			time.Sleep(20 * time.Millisecond)
		}
		eventually(t, "every record", func() bool { return committed.Load() == records+1 })
		if c := read(t, pool)["task-00"]; c.applied != records+1 || c.disorder != 0 {
			t.Errorf("applied %d times (want %d), %d out of order", c.applied, records+1, c.disorder)
		}
		return n.Load()
	}
	// Even on a loaded machine the 20 records come within about one
	// wait: a commit or two, three if the windows fall badly.
	if n := trickle(t, 2*time.Second); n > 3 {
		t.Errorf("with BatchWait, 20 records one at a time took %d commits, want at most 3", n)
	}
	if n := trickle(t, 0); n < 8 {
		t.Errorf("without BatchWait, 20 records one at a time took %d commits, want one for most of them", n)
	}
}
