// Package eventtest writes task-event envelopes into an event store the way
// a service does (concurrent transactions, optimistic concurrency with
// retries) and checks what came out of Kafka. It serves the relay and
// projection integration tests.
package eventtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// Schema is the schema the tests keep their event store in.
const Schema = "svc"

// Migrate creates the event store (and the projection offsets table when
// extra sets are given) in Schema.
func Migrate(ctx context.Context, pool *pgxpool.Pool, extra ...pg.MigrationSet) error {
	return MigrateSchema(ctx, pool, Schema, extra...)
}

// MigrateSchema is Migrate into another schema: a second service's event
// store in the same database.
func MigrateSchema(ctx context.Context, pool *pgxpool.Pool, schema string, extra ...pg.MigrationSet) error {
	return pg.Migrate(ctx, pool, schema, append([]pg.MigrationSet{eventstore.Migrations()}, extra...)...)
}

var epoch = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

// Event returns version v of task agg as a TaskProgressed envelope whose
// progress is v (so projections can check they saw the last one).
func Event(agg string, v int64) eventstore.Event {
	at := epoch.Add(time.Duration(v) * time.Millisecond)
	env := &taskv1.TaskEvent{
		EventId: uuid.NewString(), AggregateId: agg, Version: v, TenantId: "tenant-a",
		OccurredAt: timestamppb.New(at), Actor: "eventtest",
		Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{Progress: int32(v % 101), Message: fmt.Sprintf("%s@%d", agg, v)}},
	}
	if v == 1 {
		env.Event = &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{Spec: &taskv1.TaskSpec{Name: agg, Command: "true"}}}
	}
	payload, err := proto.Marshal(env)
	if err != nil {
		panic(err)
	}
	typ := "TaskProgressed"
	if v == 1 {
		typ = "TaskSubmitted"
	}
	return eventstore.Event{AggregateType: "task", AggregateID: agg, Version: v, Type: typ,
		EventID: env.EventId, TenantID: "tenant-a", OccurredAt: at, Payload: payload}
}

// Writer appends events to random aggregates from concurrent transactions.
type Writer struct {
	Pool       *pgxpool.Pool
	Aggregates int // how many aggregates to spread over
	Writers    int // concurrent transactions
	// Prefix starts every aggregate id, so the events of two stores
	// sharing a topic can be told apart.
	Prefix string
	// AfterCommit is called after each commit with the running total.
	AfterCommit func(total int64)

	total atomic.Int64
}

// Write appends exactly n events (1–3 per transaction) and returns when all
// are committed. Conflicts are retried like a service would: reload, decide
// again.
func (w *Writer) Write(ctx context.Context, n int64) error {
	st := eventstore.New()
	var reserved atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, w.Writers)
	for i := 0; i < w.Writers; i++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			for {
				k := int64(1 + rng.IntN(3))
				if left := n - reserved.Load(); left <= 0 {
					return
				} else if k > left {
					k = left
				}
				if reserved.Add(k) > n {
					reserved.Add(-k)
					continue
				}
				agg := fmt.Sprintf("%stask-%04d", w.Prefix, rng.IntN(w.Aggregates))
				for {
					err := pg.InTx(ctx, w.Pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
						var cur int64
						if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM events WHERE aggregate_id = $1`, agg).Scan(&cur); err != nil {
							return err
						}
						batch := make([]eventstore.Event, k)
						for j := range batch {
							batch[j] = Event(agg, cur+1+int64(j))
						}
						return st.Append(ctx, tx, batch...)
					})
					if errors.Is(err, eventstore.ErrConflict) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
				total := w.total.Add(k)
				if w.AfterCommit != nil {
					w.AfterCommit(total)
				}
			}
		}(uint64(i) + 1)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Record is a Kafka record as any client reads it.
type Record struct {
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
}

// CheckExactlyOnceInOrder fails t unless records hold every event of the
// events table exactly once, decodable as taskv1.TaskEvent, keyed by
// aggregate, and in version order within each aggregate.
func CheckExactlyOnceInOrder(t testing.TB, ctx context.Context, pool *pgxpool.Pool, records []Record) {
	t.Helper()
	want := map[string]int64{} // aggregate -> last version
	rows, err := pool.Query(ctx, `SELECT aggregate_id, max(version) FROM events GROUP BY aggregate_id`)
	if err != nil {
		t.Fatal(err)
	}
	var (
		agg string
		v   int64
		n   int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&agg, &v}, func() error { want[agg] = v; n += v; return nil }); err != nil {
		t.Fatal(err)
	}
	if int64(len(records)) != n {
		t.Errorf("kafka holds %d records, the event store %d events", len(records), n)
	}
	type seen struct {
		version   int64
		partition int32
		offset    int64
	}
	sorted := slices.Clone(records)
	slices.SortFunc(sorted, func(a, b Record) int {
		if a.Partition != b.Partition {
			return cmp.Compare(a.Partition, b.Partition)
		}
		return cmp.Compare(a.Offset, b.Offset)
	})
	last := map[string]seen{}
	dups := 0
	for _, r := range sorted {
		var env taskv1.TaskEvent
		if err := proto.Unmarshal(r.Value, &env); err != nil {
			t.Fatalf("record %d/%d does not decode as TaskEvent: %v", r.Partition, r.Offset, err)
		}
		if string(r.Key) != env.GetAggregateId() {
			t.Fatalf("record key %q, envelope aggregate %q", r.Key, env.GetAggregateId())
		}
		prev, ok := last[env.GetAggregateId()]
		switch {
		case ok && prev.partition != r.Partition:
			t.Fatalf("%s in partitions %d and %d", env.GetAggregateId(), prev.partition, r.Partition)
		case ok && env.GetVersion() <= prev.version:
			dups++
			if dups < 10 {
				t.Errorf("%s version %d at offset %d after version %d at offset %d", env.GetAggregateId(), env.GetVersion(), r.Offset, prev.version, prev.offset)
			}
		case env.GetVersion() != prev.version+1:
			t.Errorf("%s jumps from version %d to %d (offset %d)", env.GetAggregateId(), prev.version, env.GetVersion(), r.Offset)
		}
		last[env.GetAggregateId()] = seen{env.GetVersion(), r.Partition, r.Offset}
	}
	for a, v := range want {
		if last[a].version != v {
			t.Errorf("%s: last version in kafka %d, in the event store %d", a, last[a].version, v)
		}
	}
	if dups > 0 {
		t.Errorf("%d duplicated or reordered records", dups)
	}
}
