package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

const schema = "svc"

// counters is a tiny inline projection used by these tests: one row per
// aggregate with its version and the writer of its last event.
var testMigrations = pg.MigrationSet{Component: "test", Migrations: []pg.Migration{{
	Version: 1, Name: "counters",
	SQL: `CREATE TABLE counters (id text PRIMARY KEY, version bigint NOT NULL, writer text NOT NULL)`,
}}}

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, schema, eventstore.Migrations(), testMigrations)
	}))
}

func event(agg string, version int64, writer string) eventstore.Event {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).Add(time.Duration(version) * time.Second)
	env := &taskv1.TaskEvent{
		EventId: uuid.NewString(), AggregateId: agg, Version: version,
		OccurredAt: timestamppb.New(now), TenantId: "t1", Actor: writer,
		Event: &taskv1.TaskEvent_Progressed{Progressed: &taskv1.TaskProgressed{Message: writer}},
	}
	payload, err := proto.Marshal(env)
	if err != nil {
		panic(err)
	}
	return eventstore.Event{
		AggregateType: "task", AggregateID: agg, Version: version, Type: "TaskProgressed",
		EventID: env.EventId, TenantID: "t1", OccurredAt: now, Payload: payload,
		Headers: map[string]string{"writer": writer},
	}
}

// appendWithProjection is one command: two events and the inline
// projection row, committed together.
func appendWithProjection(ctx context.Context, pool *pgxpool.Pool, st *eventstore.Store, agg string, first int64, writer string) error {
	return pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := st.Append(ctx, tx, event(agg, first, writer), event(agg, first+1, writer)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO counters (id, version, writer) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, writer = EXCLUDED.writer`, agg, first+1, writer)
		return err
	})
}

func TestAppendLoadRoundTrip(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, schema)
	st := eventstore.New()
	if err := appendWithProjection(ctx, pool, st, "a1", 1, "w"); err != nil {
		t.Fatal(err)
	}
	got, err := st.Load(ctx, pool, "a1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Version != 1 || got[1].Version != 2 || got[0].ID >= got[1].ID {
		t.Fatalf("load = %+v", got)
	}
	want := event("a1", 1, "w")
	if got[0].Type != want.Type || got[0].TenantID != "t1" || !got[0].OccurredAt.Equal(want.OccurredAt) ||
		got[0].Headers["writer"] != "w" || got[0].AggregateType != "task" {
		t.Fatalf("event fields not kept: %+v", got[0])
	}
	var env taskv1.TaskEvent
	if err := proto.Unmarshal(got[1].Payload, &env); err != nil || env.GetVersion() != 2 {
		t.Fatalf("payload = %v, %v", &env, err)
	}
	after, err := st.Load(ctx, pool, "a1", 1)
	if err != nil || len(after) != 1 || after[0].Version != 2 {
		t.Fatalf("load after 1 = %+v, %v", after, err)
	}
}

// Eight writers race for the same versions of the same aggregates: exactly
// one wins each, the others get the typed conflict and leave nothing behind
// (neither their other event nor their projection row).
func TestConcurrentWritersExactlyOneWinsEachVersion(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, schema)
	st := eventstore.New()
	const (
		writers    = 8
		aggregates = 10
		rounds     = 15
	)
	var (
		mu        sync.Mutex
		wins      = map[string]string{} // "agg/round" -> writer
		conflicts int
	)
	var wg sync.WaitGroup
	for a := 0; a < aggregates; a++ {
		wg.Add(1)
		go func(agg string) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				var round sync.WaitGroup
				start := make(chan struct{})
				for w := 0; w < writers; w++ {
					round.Add(1)
					go func(writer string) {
						defer round.Done()
						<-start
						err := appendWithProjection(ctx, pool, st, agg, int64(2*r+1), writer)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							if prev, ok := wins[fmt.Sprintf("%s/%d", agg, r)]; ok {
								t.Errorf("%s round %d won by %s and %s", agg, r, prev, writer)
							}
							wins[fmt.Sprintf("%s/%d", agg, r)] = writer
						case errors.Is(err, eventstore.ErrConflict):
							var ce *eventstore.ConflictError
							if !errors.As(err, &ce) || ce.AggregateID != agg {
								t.Errorf("conflict error does not name the aggregate: %v", err)
							}
							conflicts++
						default:
							t.Errorf("unexpected error: %v", err)
						}
					}(fmt.Sprintf("w%d", w))
				}
				close(start)
				round.Wait()
			}
		}(fmt.Sprintf("agg-%d", a))
	}
	wg.Wait()
	if len(wins) != aggregates*rounds {
		t.Fatalf("wins = %d, want %d", len(wins), aggregates*rounds)
	}
	if want := aggregates * rounds * (writers - 1); conflicts != want {
		t.Fatalf("conflicts = %d, want %d", conflicts, want)
	}
	for a := 0; a < aggregates; a++ {
		agg := fmt.Sprintf("agg-%d", a)
		evs, err := st.Load(ctx, pool, agg, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2*rounds {
			t.Fatalf("%s has %d events, want %d", agg, len(evs), 2*rounds)
		}
		for i, e := range evs {
			r := i / 2
			if e.Version != int64(i+1) || e.Headers["writer"] != wins[fmt.Sprintf("%s/%d", agg, r)] {
				t.Fatalf("%s event %d = v%d by %s; round winner %s", agg, i, e.Version, e.Headers["writer"], wins[fmt.Sprintf("%s/%d", agg, r)])
			}
		}
		var (
			version int64
			writer  string
		)
		if err := pool.QueryRow(ctx, `SELECT version, writer FROM counters WHERE id = $1`, agg).Scan(&version, &writer); err != nil {
			t.Fatal(err)
		}
		if version != 2*rounds || writer != wins[fmt.Sprintf("%s/%d", agg, rounds-1)] {
			t.Fatalf("%s projection = v%d by %s", agg, version, writer)
		}
	}
}

func TestAppendRejectsInvalidBatches(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, schema)
	st := eventstore.New()
	noPayload := event("x", 1, "w")
	noPayload.Payload = nil
	noType := event("x", 1, "w")
	noType.Type = ""
	noTime := event("x", 1, "w")
	noTime.OccurredAt = time.Time{}
	zero := event("x", 0, "w")
	noID := event("x", 1, "w")
	noID.EventID = ""
	huge := event("x", 1, "w")
	huge.Payload = make([]byte, eventstore.MaxPayload+1)
	for name, batch := range map[string][]eventstore.Event{
		"gap":        {event("x", 1, "w"), event("x", 3, "w")},
		"repeat":     {event("x", 1, "w"), event("x", 1, "w")},
		"no payload": {noPayload},
		"no type":    {noType},
		"no time":    {noTime},
		"version 0":  {zero},
		"no id":      {noID},
		"too large":  {huge},
	} {
		err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error { return st.Append(ctx, tx, batch...) })
		if !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("events stored after invalid appends: %d, %v", n, err)
	}
}

// A transaction that took its id before another appended an aggregate's
// version N must not append version N+1: the relay publishes in
// transaction order and would publish N+1 first. The append is refused
// as a serialization failure, changes nothing, and the same command in a
// new transaction succeeds. Events of other aggregates, and an aggregate's
// consecutive versions in one append, are not affected.
func TestAppendRefusesToFollowANewerTransaction(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, schema)
	st := eventstore.New()
	older, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = older.Rollback(ctx) }()
	// The older transaction takes its id first, as one does that writes
	// another row before it reads the aggregate.
	if err := st.Append(ctx, older, event("other", 1, "older"), event("other", 2, "older")); err != nil {
		t.Fatal(err)
	}
	if err := appendWithProjection(ctx, pool, st, "a", 1, "newer"); err != nil {
		t.Fatal(err)
	}
	err = st.Append(ctx, older, event("a", 3, "older"))
	if !pg.IsSerializationFailure(err) || errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("append after a newer transaction's version = %v, want a serialization failure", err)
	}
	if err := older.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE aggregate_id IN ('a', 'other')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("events after the refused append: %d (want a's 2), %v", n, err)
	}
	// Decided again in a new transaction: it follows, in position order.
	if err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return st.Append(ctx, tx, event("a", 3, "retry"), event("a", 4, "retry"))
	}); err != nil {
		t.Fatalf("the append in a new transaction: %v", err)
	}
	rows, err := pool.Query(ctx, `SELECT version FROM events WHERE aggregate_id = 'a' ORDER BY tx_id, id`)
	if err != nil {
		t.Fatal(err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || fmt.Sprint(versions) != "[1 2 3 4]" {
		t.Fatalf("a's versions in position order = %v, %v", versions, err)
	}
}

// The inline projection is rebuildable from the events alone.
func TestRebuildInlineProjectionFromEvents(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, schema)
	st := eventstore.New()
	for a := 0; a < 30; a++ {
		for v := 1; v <= 1+a%5*2; v += 2 {
			if err := appendWithProjection(ctx, pool, st, fmt.Sprintf("r%d", a), int64(v), fmt.Sprintf("w%d", v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	snapshot := func() map[string]string {
		rows, err := pool.Query(ctx, `SELECT id, version, writer FROM counters`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		var (
			id, w string
			v     int64
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &v, &w}, func() error { out[id] = fmt.Sprint(v, w); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	live := snapshot()
	err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `TRUNCATE counters`); err != nil {
			return err
		}
		return st.Rebuild(ctx, tx, "task", 7, func(ctx context.Context, page []eventstore.Event) error {
			for _, e := range page {
				if _, err := tx.Exec(ctx, `INSERT INTO counters (id, version, writer) VALUES ($1, $2, $3)
					ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, writer = EXCLUDED.writer
					WHERE counters.version < EXCLUDED.version`, e.AggregateID, e.Version, e.Headers["writer"]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	rebuilt := snapshot()
	if len(rebuilt) != len(live) || len(live) != 30 {
		t.Fatalf("rebuilt %d rows, live %d", len(rebuilt), len(live))
	}
	for k, v := range live {
		if rebuilt[k] != v {
			t.Fatalf("row %s: live %s, rebuilt %s", k, v, rebuilt[k])
		}
	}
}
