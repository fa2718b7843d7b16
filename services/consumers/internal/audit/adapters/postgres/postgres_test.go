package postgres_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/adapters/archive"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, consumers.Schema, consumers.Migrations()...)
	}))
}

var day0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// records are task events of two tenants over January 2024: each task is
// created, started and completed; every fifth is cancelled instead.
func records(t *testing.T) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for i := range 30 {
		tenant := []string{"acme", "globex"}[i%2]
		task := fmt.Sprintf("task-%02d", i)
		at := day0.Add(time.Duration(i) * 24 * time.Hour)
		evs := []*taskv1.TaskEvent{
			{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{Spec: &taskv1.TaskSpec{Name: "n" + task}}}},
			{Event: &taskv1.TaskEvent_Started{Started: &taskv1.TaskStarted{AttemptId: "a"}}},
			{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{AttemptId: "a"}}},
		}
		if i%5 == 0 {
			evs[2] = &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Canceled{Canceled: &taskv1.TaskCanceled{Reason: "r"}}}
		}
		for v, ev := range evs {
			ev.EventId, ev.AggregateId, ev.Version, ev.TenantId = fmt.Sprintf("ev-%s-%d", task, v+1), task, int64(v+1), tenant
			ev.Actor, ev.ActorIp, ev.OccurredAt = "key-"+tenant, "198.51.100."+fmt.Sprint(i), timestamppb.New(at.Add(time.Duration(v)*time.Minute))
			b, err := proto.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &kgo.Record{Value: b})
		}
	}
	return out
}

func apply(t *testing.T, pool *pgxpool.Pool, table string, recs []*kgo.Record) {
	t.Helper()
	err := pg.InTx(context.Background(), pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return postgres.Projection{Table: table, Topic: postgres.TaskTopic}.Apply(context.Background(), tx, recs)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_logs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func ids(es []domain.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// The document's query (resource=task&action=created&from=…&to=…), the
// other filters, paging and tenant scoping, against Postgres.
func TestListAuditLogs(t *testing.T) {
	pool := pgtest.New(t).Open(t, consumers.Schema)
	recs := records(t)
	apply(t, pool, "audit_logs", recs)
	apply(t, pool, "audit_logs", recs) // redelivered: nothing doubles
	if n := count(t, pool); n != 90 {
		t.Fatalf("%d rows after applying twice, want 90", n)
	}
	a := app.New(app.Config{Store: postgres.Store{DB: pool}})
	ctx := context.Background()
	list := func(c app.Caller, in domain.QueryInput) []domain.Entry {
		t.Helper()
		var all []domain.Entry
		for {
			page, next, err := a.ListAuditLogs(ctx, c, in)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if next == "" {
				return all
			}
			in.PageToken = next
		}
	}
	op := app.Caller{Operator: true}
	got := list(op, domain.QueryInput{Resource: "task", Action: "created", From: "2024-01-01", To: "2024-01-10", PageSize: 4})
	if len(got) != 10 || got[0].ID != "ev-task-09-1" || got[9].ID != "ev-task-00-1" {
		t.Fatalf("created in 1–10 Jan = %v", ids(got))
	}
	e := got[0]
	if e.Action != "task.created" || e.Resource != "task" || e.ResourceID != "task-09" || e.UserID != "key-globex" ||
		e.IP != "198.51.100.9" || e.Details != `{"name":"ntask-09","queue":"","type":""}` {
		t.Errorf("entry = %+v", e)
	}
	if got := list(app.Caller{Tenant: "acme"}, domain.QueryInput{Resource: "task", Action: "created", PageSize: 7}); len(got) != 15 ||
		slices.ContainsFunc(got, func(e domain.Entry) bool { return e.TenantID != "acme" }) {
		t.Errorf("acme sees %d entries: %v", len(got), ids(got))
	}
	if got := list(op, domain.QueryInput{Action: "task.cancelled"}); len(got) != 6 {
		t.Errorf("cancelled = %v", ids(got))
	}
	if got := list(op, domain.QueryInput{Action: "completed"}); len(got) != 24 {
		t.Errorf("verb completed = %d entries", len(got))
	}
	if got := list(op, domain.QueryInput{ResourceID: "task-07", UserID: "key-globex"}); len(got) != 3 {
		t.Errorf("task-07 = %v", ids(got))
	}
	if got := list(op, domain.QueryInput{From: "2024-01-05T00:01:00Z", To: "2024-01-05T00:02:00Z"}); len(got) != 2 {
		t.Errorf("two minutes of 5 Jan = %v", ids(got))
	}
	if got := list(op, domain.QueryInput{TenantID: "globex", Action: "task.started"}); len(got) != 15 {
		t.Errorf("operator filtered to globex = %d", len(got))
	}
}

// Entries of one timestamp list in the order their events were recorded,
// newest first: one aggregate's by version whatever their random ids say,
// across page boundaries too, as the same rows written by a replay.
func TestEntriesOfOneTimestampFollowTheEventLog(t *testing.T) {
	pool := pgtest.New(t).Open(t, consumers.Schema)
	at := timestamppb.New(day0.Add(13*time.Hour + 26*time.Second + 240896*time.Microsecond))
	// A failed attempt with its retry, twice, all at one instant (as a
	// command records them), and a group created and started together.
	// The ids sort against the versions.
	var recs []*kgo.Record
	add := func(ev proto.Message) {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Value: b})
	}
	for v, ev := range []*taskv1.TaskEvent{
		{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{AttemptId: "a1", Error: "exit 1", RetryFollows: true}}},
		{Event: &taskv1.TaskEvent_RetryScheduled{RetryScheduled: &taskv1.TaskRetryScheduled{RetryCount: 1}}},
		{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{AttemptId: "a2", Error: "exit 1", RetryFollows: true}}},
		{Event: &taskv1.TaskEvent_RetryScheduled{RetryScheduled: &taskv1.TaskRetryScheduled{RetryCount: 2}}},
	} {
		ev.EventId, ev.AggregateId, ev.Version, ev.TenantId, ev.OccurredAt = fmt.Sprintf("ev-%c", 'z'-v), "task-1", int64(7+v), "acme", at
		add(ev)
	}
	for v, ev := range []*taskv1.OrchestrationEvent{
		{Event: &taskv1.OrchestrationEvent_TaskGroupCreated{TaskGroupCreated: &taskv1.TaskGroupCreated{Name: "g"}}},
		{Event: &taskv1.OrchestrationEvent_TaskGroupStarted{TaskGroupStarted: &taskv1.TaskGroupStarted{}}},
	} {
		ev.EventId, ev.AggregateId, ev.Version, ev.TenantId, ev.OccurredAt = fmt.Sprintf("gv-%c", 'z'-v), "group-1", int64(1+v), "acme", at
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.InTx(context.Background(), pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			return postgres.Projection{Table: "audit_logs", Topic: postgres.OrchestrationTopic}.Apply(context.Background(), tx,
				[]*kgo.Record{{Value: b}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Delivered in reverse, and the last record twice in one batch.
	slices.Reverse(recs)
	apply(t, pool, "audit_logs", append(recs, recs[len(recs)-1]))

	a := app.New(app.Config{Store: postgres.Store{DB: pool}})
	ctx := context.Background()
	list := func(in domain.QueryInput) ([]string, int) {
		t.Helper()
		var actions []string
		pages := 0
		for {
			page, next, err := a.ListAuditLogs(ctx, app.Caller{Tenant: "acme"}, in)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, e := range page {
				actions = append(actions, e.ResourceID+" "+e.Action)
			}
			if next == "" {
				return actions, pages
			}
			in.PageToken = next
		}
	}
	want := []string{"task-1 task.retry_scheduled", "task-1 task.failed", "task-1 task.retry_scheduled", "task-1 task.failed"}
	for _, size := range []int{1, 3, 100} {
		if got, pages := list(domain.QueryInput{Resource: "task", PageSize: size}); !slices.Equal(got, want) {
			t.Errorf("pages of %d (%d pages) = %v, want %v", size, pages, got, want)
		}
	}
	wantGroup := []string{"group-1 task_group.started", "group-1 task_group.created"}
	if got, _ := list(domain.QueryInput{Resource: "task_group", PageSize: 1}); !slices.Equal(got, wantGroup) {
		t.Errorf("the group = %v, want %v", got, wantGroup)
	}
	// Across resources, ties are still one order whatever the page size.
	all, _ := list(domain.QueryInput{PageSize: 100})
	for _, size := range []int{1, 2, 4} {
		if got, _ := list(domain.QueryInput{PageSize: size}); !slices.Equal(got, all) || len(got) != 6 {
			t.Errorf("everything in pages of %d = %v, want %v", size, got, all)
		}
	}

	// An entry stored before entries carried a version takes it when its
	// record is read again, and nothing else changes.
	if _, err := pool.Exec(ctx, `UPDATE audit_logs SET version = 0, details = '{"kept":true}' WHERE resource = 'task'`); err != nil {
		t.Fatal(err)
	}
	apply(t, pool, "audit_logs", recs)
	if got, _ := list(domain.QueryInput{Resource: "task", PageSize: 1}); !slices.Equal(got, want) {
		t.Errorf("after the versions were filled in = %v, want %v", got, want)
	}
	var kept int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_logs WHERE details::text = '{"kept":true}' AND version > 0`).Scan(&kept); err != nil || kept != 4 {
		t.Errorf("%d entries kept as stored with their version filled in (%v), want 4", kept, err)
	}
}

// Retention with an injected clock archives the expired entries as gzip
// JSON Lines, deletes them, and the archive reads back; the projection
// does not write them again.
func TestRetentionArchivesThenDeletes(t *testing.T) {
	pool := pgtest.New(t).Open(t, consumers.Schema)
	recs := records(t)
	apply(t, pool, "audit_logs", recs)
	secret := make([]byte, 32)
	rand.Read(secret)
	objects, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: "http://127.0.0.1:1/objects", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	now := day0.AddDate(0, 0, 100) // 10 April: entries before 11 January are older than 90 days
	a := app.New(app.Config{Store: postgres.Store{DB: pool}, Expirer: postgres.Expirer{DB: pool}, Archive: archive.Archive{Objects: objects},
		Retention: domain.DefaultRetention, Batch: 7, Now: func() time.Time { return now }})
	rep, err := a.Expire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted != 30 || len(rep.Archived) != 5 || count(t, pool) != 60 {
		t.Fatalf("expire = %+v, %d rows left", rep, count(t, pool))
	}
	var back []domain.Entry
	for _, key := range rep.Archived {
		es, err := archive.Read(context.Background(), objects, key)
		if err != nil {
			t.Fatal(err)
		}
		back = append(back, es...)
	}
	if len(back) != 30 || back[0].ID != "ev-task-00-1" || back[29].ID != "ev-task-09-3" || back[0].IP != "198.51.100.0" ||
		back[0].Details == "" || !back[0].At.Equal(day0) {
		t.Fatalf("archive read back %d entries: first %+v", len(back), back[0])
	}
	apply(t, pool, "audit_logs", recs) // a replay into the live table
	if n := count(t, pool); n != 60 {
		t.Errorf("after a replay %d rows, want 60: archived entries came back", n)
	}
}
