package projection_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/internal/eventtest"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/projection"
)

// messageHandler projects each event's progress message into
// task_progress as it comes, the way a convert step that forgot to clean
// its text would: a message with a NUL byte fails in Postgres. With clean
// set it cleans the text first (the fix an operator deploys before
// retrying). transient, while above zero, fails every call with a
// connection error (an outage, not the record's fault).
type messageHandler struct {
	table     string
	clean     atomic.Bool
	transient atomic.Int32
}

func (h *messageHandler) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	if h.transient.Load() > 0 {
		h.transient.Add(-1)
		return fmt.Errorf("apply: %w", &pgconn.PgError{Code: "08006", Message: "connection failure"})
	}
	t := pgx.Identifier{h.table}.Sanitize()
	for _, rec := range records {
		var env taskv1.TaskEvent
		if err := proto.Unmarshal(rec.Value, &env); err != nil {
			return fmt.Errorf("decode %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		msg := env.GetProgressed().GetMessage()
		if h.clean.Load() {
			msg = pg.CleanText(msg)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+t+` (task_id, tenant, version, progress, message, events)
			VALUES ($1, $2, $3, $4, $5, 1) ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version,
				progress = EXCLUDED.progress, message = EXCLUDED.message, events = `+t+`.events + 1
			WHERE `+t+`.version < EXCLUDED.version`,
			env.GetAggregateId(), env.GetTenantId(), env.GetVersion(), env.GetProgressed().GetProgress(), msg); err != nil {
			return err
		}
	}
	return nil
}

// produce writes records to topic directly, each with the event id header
// the relay sets.
func produce(t *testing.T, b *kafkatest.Broker, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func progressRecord(t *testing.T, task, msg string) *kgo.Record {
	t.Helper()
	env := &taskv1.TaskEvent{EventId: "ev-" + task, AggregateId: task, Version: 1, TenantId: "tenant-a",
		Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{Progress: 7, Message: msg}}}
	b, err := proto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Key: []byte(task), Value: b, Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte("ev-" + task)}}}
}

func messages(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT task_id, message FROM task_progress`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var id, msg string
	if _, err := pgx.ForEachRow(rows, []any{&id, &msg}, func() error { out[id] = msg; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A record that fails on its own is parked after the bounded retries and
// the projection goes on; retried after the fix it is applied and leaves
// the dead letters; one that still fails stays, with its new error; a
// dropped one is gone. The replay leaves out what the live side parked.
func TestDeadLettersParkRetryAndDrop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.New(t).Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(1))
	h := &messageHandler{table: "task_progress"}
	parked := make(chan projection.DeadLetter, 10)
	cfg := runnerConfig(b.Addrs())
	cfg.Partitions, cfg.MaxAttempts, cfg.RetryBackoff, cfg.RetryPoll = 1, 2, 10*time.Millisecond, 50*time.Millisecond
	cfg.OnDeadLetter = func(d projection.DeadLetter) { parked <- d }
	runner := projection.NewRunner(pool, cfg, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(ctx) }()
	defer func() { cancel(); <-done }()

	garbage := &kgo.Record{Key: []byte("t-x"), Value: []byte{0xff, 0x01, 0x02},
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte("ev-garbage")}}}
	produce(t, b, progressRecord(t, "t-1", "ok"), progressRecord(t, "t-2", "bad\x00"), garbage, progressRecord(t, "t-3", "fine"))
	eventually(t, "the good records", func() bool { m := messages(t, pool); return m["t-1"] == "ok" && m["t-3"] == "fine" })
	byEvent := map[string]projection.DeadLetter{}
	for range 2 {
		select {
		case d := <-parked:
			byEvent[d.EventID] = d
		case <-time.After(10 * time.Second):
			t.Fatal("no dead letter reported")
		}
	}
	nul, bad := byEvent["ev-t-2"], byEvent["ev-garbage"]
	if !strings.Contains(nul.Error, "invalid byte sequence") || nul.Attempts != 2 || nul.Offset != 1 || string(nul.Key) != "t-2" {
		t.Errorf("NUL record's dead letter = %+v", nul)
	}
	if !strings.Contains(bad.Error, "decode") || bad.Offset != 2 || string(bad.Payload) != "\xff\x01\x02" {
		t.Errorf("garbage record's dead letter = %+v", bad)
	}
	list, err := projection.ListDeadLetters(ctx, pool, projection.DeadLetterFilter{Projection: "progress"})
	if err != nil || len(list) != 2 || list[0].ID != nul.ID || list[1].ID != bad.ID {
		t.Fatalf("ListDeadLetters = %+v, %v", list, err)
	}
	if page, _ := projection.ListDeadLetters(ctx, pool, projection.DeadLetterFilter{AfterID: nul.ID, Limit: 1}); len(page) != 1 || page[0].ID != bad.ID {
		t.Errorf("second page = %+v", page)
	}

	h.clean.Store(true) // the fix
	requested, err := projection.RequestRetry(ctx, pool, nul.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitOutcome := func(id int64, requested time.Time) (bool, projection.DeadLetter) {
		var applied bool
		var d projection.DeadLetter
		eventually(t, "the retry", func() bool {
			done, ok, dl, err := projection.RetryOutcome(ctx, pool, id, requested)
			if err != nil {
				t.Fatal(err)
			}
			applied, d = ok, dl
			return done
		})
		return applied, d
	}
	if applied, _ := waitOutcome(nul.ID, requested); !applied || messages(t, pool)["t-2"] != "bad\uFFFD" {
		t.Fatalf("retry after the fix: applied %v, rows %q", applied, messages(t, pool))
	}
	requested, err = projection.RequestRetry(ctx, pool, bad.ID)
	if err != nil {
		t.Fatal(err)
	}
	if applied, d := waitOutcome(bad.ID, requested); applied || d.Attempts != 3 || d.LastRetryAt.IsZero() || !d.RetryRequestedAt.IsZero() {
		t.Fatalf("retry of the garbage: applied %v, dead letter %+v", applied, d)
	}
	if err := projection.DropDeadLetter(ctx, pool, bad.ID); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{projection.DropDeadLetter(ctx, pool, bad.ID), func() error {
		_, err := projection.RequestRetry(ctx, pool, bad.ID)
		return err
	}()} {
		if !errors.Is(err, projection.ErrNoDeadLetter) {
			t.Errorf("after the drop: %v, want ErrNoDeadLetter", err)
		}
	}
	if list, _ := projection.ListDeadLetters(ctx, pool, projection.DeadLetterFilter{}); len(list) != 0 {
		t.Errorf("dead letters left: %+v", list)
	}

	report, err := projection.Replay(ctx, pool, projection.ReplaySpec{Name: "progress", Topic: topic,
		Tables: []string{"task_progress"}, Kafka: kafka.Config{Brokers: b.Addrs()},
		NewHandler: func(m map[string]string) projection.Handler {
			r := &messageHandler{table: m["task_progress"]}
			r.clean.Store(true)
			return r
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !report.Equal() || report.Records != 4 || report.Skipped != 1 || report.Tables[0].LiveRows != 3 {
		t.Fatalf("replay report = %+v", report)
	}
}

// A failure of the database, not of a record, parks nothing: the runner
// keeps trying until the database answers, then applies everything.
func TestTransientFailuresParkNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.New(t).Open(t, eventtest.Schema)
	b := kafkatest.New(t, kafkatest.WithPartitions(1))
	h := &messageHandler{table: "task_progress"}
	h.transient.Store(12) // more than MaxAttempts plus the record-by-record pass
	cfg := runnerConfig(b.Addrs())
	cfg.Partitions, cfg.MaxAttempts, cfg.RetryBackoff = 1, 2, time.Millisecond
	var parked atomic.Int32
	cfg.OnDeadLetter = func(projection.DeadLetter) { parked.Add(1) }
	done := make(chan struct{})
	go func() { defer close(done); _ = projection.NewRunner(pool, cfg, h).Run(ctx) }()
	defer func() { cancel(); <-done }()

	produce(t, b, progressRecord(t, "t-1", "one"), progressRecord(t, "t-2", "two"))
	eventually(t, "both records", func() bool { return len(messages(t, pool)) == 2 })
	if list, _ := projection.ListDeadLetters(ctx, pool, projection.DeadLetterFilter{}); parked.Load() != 0 || len(list) != 0 {
		t.Fatalf("an outage parked records: %+v", list)
	}
}
