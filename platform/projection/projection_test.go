package projection_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/internal/eventtest"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/outbox"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/projection"
)

var topic = kafka.EnvelopeTopic(&taskv1.TaskEvent{})

var progressTable = pg.MigrationSet{Component: "test", Migrations: []pg.Migration{{Version: 1, Name: "task_progress", SQL: `
	CREATE TABLE task_progress (
		task_id  text PRIMARY KEY,
		tenant   text   NOT NULL,
		version  bigint NOT NULL,
		progress int    NOT NULL,
		message  text   NOT NULL,
		events   bigint NOT NULL
	)`}}}

const (
	envChild   = "TASKMESH_TEST_PROJECTION_CHILD"
	envDB      = "TASKMESH_TEST_PROJECTION_DB"
	envBrokers = "TASKMESH_TEST_PROJECTION_BROKERS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(runChild())
	}
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return eventtest.Migrate(ctx, pool, projection.Migrations(), progressTable)
	}))
}

// progressHandler projects task events into table: the last version,
// progress and message per task, and how many events it applied. The
// version guard makes a repeated record a no-op, which the events counter
// would expose.
func progressHandler(table string, delay time.Duration) projection.Handler {
	t := pgx.Identifier{table}.Sanitize()
	return projection.HandlerFunc(func(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
		for _, rec := range records {
			var env taskv1.TaskEvent
			if err := proto.Unmarshal(rec.Value, &env); err != nil {
				return fmt.Errorf("decode %d/%d: %w", rec.Partition, rec.Offset, err)
			}
			p := env.GetProgressed()
			if _, err := tx.Exec(ctx, `INSERT INTO `+t+` (task_id, tenant, version, progress, message, events)
				VALUES ($1, $2, $3, $4, $5, 1)
				ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version, progress = EXCLUDED.progress,
					message = EXCLUDED.message, events = `+t+`.events + 1
				WHERE `+t+`.version < EXCLUDED.version`,
				env.GetAggregateId(), env.GetTenantId(), env.GetVersion(), p.GetProgress(), p.GetMessage()); err != nil {
				return err
			}
		}
		time.Sleep(delay) // widen the window in which a kill lands mid-batch
		return nil
	})
}

func runnerConfig(brokers []string) projection.Config {
	return projection.Config{Name: "progress", Topic: topic, Partitions: 8, BatchSize: 200,
		StandbyInterval: 50 * time.Millisecond, Kafka: kafka.Config{Brokers: brokers, ClientID: "projection-test"}}
}

func runChild() int {
	ctx := context.Background()
	pool, err := pg.Open(ctx, pg.Config{URL: os.Getenv(envDB), Schema: eventtest.Schema})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child runner:", err)
		return 1
	}
	cfg := runnerConfig(strings.Split(os.Getenv(envBrokers), ","))
	_ = projection.NewRunner(pool, cfg, progressHandler("task_progress", 30*time.Millisecond)).Run(ctx)
	return 0
}

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
	kill = func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(kill)
	return kill
}

// expected folds the event store directly: what the projection must hold.
func expected(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT aggregate_id, max(version) FROM events GROUP BY aggregate_id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var (
		id string
		v  int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
		progress, msg := int64(0), ""
		if v > 1 {
			progress, msg = v%101, fmt.Sprintf("%s@%d", id, v)
		}
		out[id] = fmt.Sprintf("tenant-a v%d p%d %q events=%d", v, progress, msg, v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func projected(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT task_id, tenant, version, progress, message, events FROM task_progress`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var (
		id, tenant, msg string
		v, events       int64
		progress        int32
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &tenant, &v, &progress, &msg, &events}, func() error {
		out[id] = fmt.Sprintf("%s v%d p%d %q events=%d", tenant, v, progress, msg, events)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func waitConverged(t *testing.T, pool *pgxpool.Pool, timeout time.Duration) {
	t.Helper()
	want := expected(t, pool)
	deadline := time.Now().Add(timeout)
	for {
		got := projected(t, pool)
		diff := 0
		for k, v := range want {
			if got[k] != v {
				diff++
			}
		}
		if diff == 0 && len(got) == len(want) {
			return
		}
		if time.Now().After(deadline) {
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: projected %q, want %q", k, got[k], v)
					break
				}
			}
			t.Fatalf("projection did not converge: %d of %d rows differ, %d rows", diff, len(want), len(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startRelay(t *testing.T, pool *pgxpool.Pool, b *kafkatest.Broker) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = outbox.New(pool, outbox.Config{Name: "test", Topic: topic, Partitions: 8,
			Kafka: kafka.Config{Brokers: b.Addrs()}}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// A runner SIGKILLed mid-batch, again and again, and restarted converges to
// exactly the rows the events say (each event applied once: events=version).
// Then a full replay into a fresh table equals the live one, and a tampered
// live row is reported.
func TestProjectionConvergesAfterKillsAndReplayMatches(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(8))
	startRelay(t, pool, b)

	kill := startChild(t, db, b)
	var mu sync.Mutex
	next := int64(500)
	w := &eventtest.Writer{Pool: pool, Aggregates: 150, Writers: 4, AfterCommit: func(total int64) {
		mu.Lock()
		defer mu.Unlock()
		if total >= next {
			next += 700
			kill()
			kill = startChild(t, db, b)
		}
	}}
	if err := w.Write(ctx, 4000); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, pool, 60*time.Second)
	kill()

	spec := projection.ReplaySpec{Name: "progress", Topic: topic, Tables: []string{"task_progress"},
		NewHandler: func(tables map[string]string) projection.Handler {
			return progressHandler(tables["task_progress"], 0)
		},
		Kafka: kafka.Config{Brokers: b.Addrs()}}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	report, err := projection.Replay(rctx, pool, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !report.Equal() || report.Records != 4000 || report.Tables[0].LiveRows != 150 {
		t.Fatalf("replay report = %+v", report)
	}

	if _, err := pool.Exec(ctx, `UPDATE task_progress SET progress = progress + 1 WHERE task_id = 'task-0007'`); err != nil {
		t.Fatal(err)
	}
	report, err = projection.Replay(rctx, pool, spec)
	if err != nil {
		t.Fatal(err)
	}
	tr := report.Tables[0]
	if report.Equal() || tr.OnlyInLive != 1 || tr.OnlyInReplay != 1 || len(tr.Samples) != 2 ||
		!strings.Contains(tr.Samples[0]+tr.Samples[1], "task-0007") {
		t.Fatalf("tampered replay report = %+v", report)
	}
}

// Replay while the live runner keeps applying new events still compares
// like with like.
func TestReplayWhileLiveRunnerIsBusy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	startRelay(t, pool, b)
	runner := projection.NewRunner(pool, runnerConfig(b.Addrs()), progressHandler("task_progress", 0))
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(ctx) }()
	defer func() { cancel(); <-done }()

	w := &eventtest.Writer{Pool: pool, Aggregates: 50, Writers: 2}
	if err := w.Write(ctx, 500); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, pool, 30*time.Second)
	writing := make(chan error, 1)
	go func() { writing <- w.Write(ctx, 1500) }()
	report, err := projection.Replay(ctx, pool, projection.ReplaySpec{Name: "progress", Topic: topic,
		Tables: []string{"task_progress"}, Kafka: kafka.Config{Brokers: b.Addrs()},
		NewHandler: func(m map[string]string) projection.Handler { return progressHandler(m["task_progress"], 0) }})
	if err != nil {
		t.Fatal(err)
	}
	if !report.Equal() || report.Records < 500 {
		t.Fatalf("replay during writes = %+v", report)
	}
	if err := <-writing; err != nil {
		t.Fatal(err)
	}
}

func TestReplayRefusesAProjectionThatAppliedNothing(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(2))
	startRelay(t, pool, b)
	w := &eventtest.Writer{Pool: pool, Aggregates: 5, Writers: 1}
	if err := w.Write(ctx, 20); err != nil {
		t.Fatal(err)
	}
	// Wait for the relay's checkpoint to cover the events: it is written
	// after their Kafka commit (reading the topic before the relay created
	// it would fail).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pending int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM events e WHERE NOT EXISTS (
			SELECT 1 FROM outbox_checkpoints c WHERE c.relay = 'test' AND (e.tx_id, e.id) <= (c.tx_id, c.event_id))`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events not relayed", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(b.ConsumeAll(t, topic)); n != 20 {
		t.Fatalf("kafka holds %d records, want 20", n)
	}
	_, err := projection.Replay(ctx, pool, projection.ReplaySpec{Name: "progress", Topic: topic,
		Tables: []string{"task_progress"}, Kafka: kafka.Config{Brokers: b.Addrs()},
		NewHandler: func(m map[string]string) projection.Handler { return progressHandler(m["task_progress"], 0) }})
	if err == nil || !strings.Contains(err.Error(), "applied nothing") {
		t.Fatalf("err = %v", err)
	}
}

// A projection fed by two topics applies both in its transactions, stores
// the offsets of each, and replays from both.
func TestProjectionFollowsSeveralTopics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	const second = "test.second.v1"
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		_ = outbox.New(pool, outbox.Config{Name: "test", Topic: topic, Partitions: 4, Routes: map[string]string{"group": second},
			Kafka: kafka.Config{Brokers: b.Addrs()}}).Run(relayCtx)
	}()
	defer func() { stopRelay(); <-relayDone }()
	cfg := runnerConfig(b.Addrs())
	cfg.Topics = []string{second}
	runner := projection.NewRunner(pool, cfg, progressHandler("task_progress", 0))
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(ctx) }()
	defer func() { cancel(); <-done }()

	w := &eventtest.Writer{Pool: pool, Aggregates: 20, Writers: 2}
	if err := w.Write(ctx, 200); err != nil {
		t.Fatal(err)
	}
	for g := range 5 {
		var evs []eventstore.Event
		for v := int64(1); v <= 4; v++ {
			e := eventtest.Event(fmt.Sprintf("group-%d", g), v)
			e.AggregateType = "group"
			evs = append(evs, e)
		}
		if err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error { return eventstore.New().Append(ctx, tx, evs...) }); err != nil {
			t.Fatal(err)
		}
	}
	waitConverged(t, pool, 30*time.Second)
	if n := len(b.ConsumeAll(t, second)); n != 20 {
		t.Fatalf("%s holds %d records, want 20", second, n)
	}
	var topics int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT topic) FROM projection_offsets WHERE projection = 'progress'`).Scan(&topics); err != nil || topics != 2 {
		t.Fatalf("offsets stored for %d topics, %v", topics, err)
	}
	report, err := projection.Replay(ctx, pool, projection.ReplaySpec{Name: "progress", Topic: topic, Topics: []string{second},
		Tables: []string{"task_progress"}, Kafka: kafka.Config{Brokers: b.Addrs()},
		NewHandler: func(m map[string]string) projection.Handler { return progressHandler(m["task_progress"], 0) }})
	if err != nil {
		t.Fatal(err)
	}
	// 20 group records on 5 aggregates, 200 task records spread at random
	// over up to 20 (one may draw none): one row per aggregate written.
	if !report.Equal() || report.Records != 220 || report.Tables[0].LiveRows != int64(len(expected(t, pool))) {
		t.Fatalf("replay = %+v", report)
	}
}

// The relay's statements and a runner's batches run on generic plans that
// read indexes: the relay's read by position and its checkpoint on its
// lock's connection (pg.KeyedSession), the runner's handler and offsets
// in its transactions (pg.ReadModelTx). The relay gives its connection the
// pool's settings back when it stops.
func TestRelayAndRunnerRunOnKeyedPlans(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.New(t).Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		_ = outbox.New(pool, outbox.Config{Name: "test", Topic: topic, Partitions: 4, Kafka: kafka.Config{Brokers: b.Addrs()}}).Run(relayCtx)
	}()
	runCtx, stopRunner := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = projection.NewRunner(pool, runnerConfig(b.Addrs()), progressHandler("task_progress", 0)).Run(runCtx)
	}()
	w := &eventtest.Writer{Pool: pool, Aggregates: 20, Writers: 2}
	if err := w.Write(ctx, 300); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, pool, 30*time.Second)
	stopRunner()
	<-runDone
	stopRelay()
	<-relayDone

	pgtest.CheckKeyedPlans(t, ctx, pool, "after the relay and the runner", []string{
		"SELECT tx_id::text AS tx_text",  // the relay's read
		"INSERT INTO outbox_checkpoints", // its checkpoint
		`INSERT INTO "task_progress"`,    // the handler's write
		"INSERT INTO projection_offsets", // the runner's offsets
	})
	for _, conn := range pool.AcquireAllIdle(ctx) {
		var mode, seqscan string
		err := conn.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan')`).Scan(&mode, &seqscan)
		conn.Release()
		if err != nil || mode != "force_custom_plan" || seqscan != "on" {
			t.Errorf("a pool connection after the relay stopped: plan_cache_mode %q, enable_seqscan %q, %v", mode, seqscan, err)
		}
	}
}

// Events committed one at a time, which the relay publishes one Kafka
// transaction each, are one batch each when every fetch is answered at
// once, and gathered into a few with BatchWait.
func TestBatchWaitGathersATrickleOfEvents(t *testing.T) {
	trickle := func(t *testing.T, wait time.Duration) (batches int64) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pool := pgtest.New(t).Open(t, eventtest.Schema)
		b := kafkatest.New(t, kafkatest.WithPartitions(4))
		startRelay(t, pool, b)
		appendOne := func(v int64) {
			t.Helper()
			if err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				return eventstore.New().Append(ctx, tx, eventtest.Event("task-0", v))
			}); err != nil {
				t.Fatal(err)
			}
		}
		appendOne(1) // the topic exists and the runner has a first batch behind it
		cfg := runnerConfig(b.Addrs())
		cfg.BatchWait = wait
		var n, committed atomic.Int64
		cfg.AfterCommit = func(recs []*kgo.Record) { n.Add(1); committed.Add(int64(len(recs))) }
		runner := projection.NewRunner(pool, cfg, progressHandler("task_progress", 0))
		done := make(chan struct{})
		go func() { defer close(done); _ = runner.Run(ctx) }()
		defer func() { cancel(); <-done }()
		waitFor(t, func() bool { return committed.Load() == 1 })
		n.Store(0)
		const events = 20
		for v := int64(2); v <= events+1; v++ {
			appendOne(v)
			// Past the idle relay's first polls (10 and 20 ms), so that
			// it publishes each event apart.
			time.Sleep(40 * time.Millisecond)
		}
		waitConverged(t, pool, 30*time.Second)
		return n.Load()
	}
	// Even on a loaded machine the 20 events come within about one wait:
	// a batch or two, three if the windows fall badly.
	if n := trickle(t, 2*time.Second); n > 3 {
		t.Errorf("with BatchWait, 20 events one at a time took %d batches, want at most 3", n)
	}
	if n := trickle(t, 0); n < 8 {
		t.Errorf("without BatchWait, 20 events one at a time took %d batches, want one for most of them", n)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
