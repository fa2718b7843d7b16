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
	"google.golang.org/protobuf/proto"

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
		return eventtest.Migrate(ctx, pool)
	}))
}

func relayConfig(brokers []string) outbox.Config {
	return outbox.Config{Name: "test", Topic: topic, Partitions: 8, BatchSize: 500,
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
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		var pending int64
		err := pool.QueryRow(ctx, `SELECT count(*) FROM events e WHERE NOT EXISTS (
			SELECT 1 FROM outbox_checkpoints c WHERE c.relay = 'test' AND (e.tx_id, e.id) <= (c.tx_id, c.event_id))`).Scan(&pending)
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

// A transaction that took a lower id but commits after a later one must not
// be skipped: the relay waits for it, then publishes both, in order.
func TestRelayWaitsForLateCommit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	relay := outbox.New(pool, relayConfig(b.Addrs()))
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	defer func() { cancel(); <-done }()

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

// A relay that crashed after a Kafka commit but before its checkpoint write
// must not publish those events again: the successor reads the partitions'
// tails. Rewinding the checkpoint to zero simulates the lost write.
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
	if _, err := pool.Exec(ctx, `UPDATE outbox_checkpoints SET tx_id = '0', event_id = 0`); err != nil {
		t.Fatal(err)
	}
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

// Routes send one aggregate type's events to a topic of its own; each
// topic holds exactly its events, in version order, also after a relay
// lost its checkpoint (the successor reads both topics' tails).
func TestRelayRoutesAggregateTypesToTheirTopics(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pool := db.Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(4))
	const routed = "test.routed.v1"
	cfg := relayConfig(b.Addrs())
	cfg.Routes = map[string]string{"group": routed}
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
	run := func() (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = outbox.New(pool, cfg).Run(rctx) }()
		return func() { cancel(); <-done }
	}
	stop := run()
	appendEvents("task-a", "task", 10)
	appendEvents("group-1", "group", 7)
	appendEvents("task-b", "task", 5)
	waitRelayed(t, pool, 20*time.Second)
	stop()
	if _, err := pool.Exec(ctx, `UPDATE outbox_checkpoints SET tx_id = '0', event_id = 0`); err != nil {
		t.Fatal(err)
	}
	stop = run()
	defer stop()
	appendEvents("group-1", "group", 3)
	appendEvents("task-a", "task", 2)
	waitRelayed(t, pool, 20*time.Second)

	check := func(topic string, want map[string]int64) {
		t.Helper()
		got := map[string]int64{}
		for _, r := range b.ConsumeAll(t, topic) {
			key := string(r.Key)
			var env taskv1.TaskEvent
			if err := proto.Unmarshal(r.Value, &env); err != nil {
				t.Fatal(err)
			}
			if env.GetVersion() != got[key]+1 {
				t.Fatalf("%s: %s version %d after %d", topic, key, env.GetVersion(), got[key])
			}
			got[key] = env.GetVersion()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s holds %v, want %v", topic, got, want)
		}
	}
	check(topic, map[string]int64{"task-a": 12, "task-b": 5})
	check(routed, map[string]int64{"group-1": 10})
}
