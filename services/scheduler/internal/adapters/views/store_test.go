package views_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/views"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, scheduler.Schema, scheduler.Migrations()...)
	}))
}

// history is a task's events as topic records, versions 1…n.
func history(t *testing.T, id string) []*kgo.Record {
	t.Helper()
	spec, err := domain.NormalizeSpec(domain.SpecInput{Name: "n-" + id, Command: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	events := []domain.Event{
		domain.Submitted{ID: id, TenantID: "tenant-a", CreatedBy: "key-1", Spec: spec},
		domain.Leased{AttemptID: "a", AgentID: "ag", MachineID: "m"},
		domain.Started{AttemptID: "a"},
		domain.Succeeded{AttemptID: "a", EndedAt: at.Add(time.Minute)},
	}
	var out []*kgo.Record
	for i, e := range events {
		v := int64(i + 1)
		payload, err := codec.Marshal(fmt.Sprintf("ev-%s-%d", id, v), id, "tenant-a", v,
			domain.Record{Event: e, At: at.Add(time.Duration(i) * time.Second), Actor: "key-1"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &kgo.Record{Key: []byte(id), Value: payload, Offset: int64(len(out))})
	}
	return out
}

type snapshot struct {
	views map[string]string // id → version/status/doc
}

func read(t *testing.T, pool *pgxpool.Pool) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{views: map[string]string{}}
	rows, err := pool.Query(ctx, `SELECT id, version, status, doc::text FROM task_views`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, status, doc string
		var v int64
		if err := rows.Scan(&id, &v, &status, &doc); err != nil {
			t.Fatal(err)
		}
		s.views[id] = fmt.Sprint(v, " ", status, " ", doc)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

func apply(t *testing.T, pool *pgxpool.Pool, records []*kgo.Record) {
	t.Helper()
	ctx := context.Background()
	err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return views.TaskViews{Table: "task_views"}.Apply(ctx, tx, records)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The stores are idempotent: a batch stored again, or older events
// redelivered after newer ones, change no row; newer events move a row on.
func TestStoresAreIdempotentAndVersionGuarded(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	t1, t2 := history(t, "t1"), history(t, "t2")

	apply(t, pool, append(append([]*kgo.Record{}, t1[:2]...), t2[:3]...))
	first := read(t, pool)
	if len(first.views) != 2 {
		t.Fatalf("after the first batch: %+v", first)
	}
	apply(t, pool, append(append([]*kgo.Record{}, t1[:2]...), t2[:3]...)) // redelivered
	apply(t, pool, t2[:1])                                                // replayed from the start
	if again := read(t, pool); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("storing again changed the tables:\n before %+v\n after  %+v", first, again)
	}

	apply(t, pool, append(t1, t2...)) // everything, old and new
	last := read(t, pool)
	if last.views["t1"][:11] != "4 completed" || last.views["t2"][:11] != "4 completed" {
		t.Fatalf("after the rest: %+v", last)
	}
}

// A task whose text Postgres cannot store (a NUL in its name or an
// argument; protobuf already refuses invalid UTF-8 in an event) is stored
// cleaned, the same way every time, instead of failing the projection for
// good.
func TestStoreCleansWhatPostgresCannotHold(t *testing.T) {
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	spec, err := domain.NormalizeSpec(domain.SpecInput{Name: "x\x00", Command: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	// Today's scheduler refuses a NUL in an argument; events of an older
	// one may still have it.
	spec.Args = []string{"a\x00b", `lit\u0000eral`}
	payload, err := codec.Marshal("ev-1", "nul-task", "tenant-a", 1, domain.Record{Event: domain.Submitted{ID: "nul-task",
		TenantID: "tenant-a", Spec: spec}, At: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, pool, []*kgo.Record{{Key: []byte("nul-task"), Value: payload}})
	var name string
	var doc []byte
	if err := pool.QueryRow(context.Background(), `SELECT name, doc::jsonb::text FROM task_views WHERE id = 'nul-task'`).Scan(&name, &doc); err != nil {
		t.Fatal(err)
	}
	if name != "x\uFFFD" {
		t.Errorf("name = %q", name)
	}
	var back struct {
		Spec struct {
			Name string   `json:"name"`
			Args []string `json:"args"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(doc, &back); err != nil || back.Spec.Name != "x\uFFFD" || back.Spec.Args[0] != "a\uFFFDb" ||
		back.Spec.Args[1] != `lit\u0000eral` {
		t.Errorf("doc = %s (%+v, %v)", doc, back, err)
	}
}
