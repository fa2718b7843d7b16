package consumers_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	hookpg "github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/adapters/postgres"
)

// The webhook consumer wakes the dispatcher only after a transaction that
// scheduled a delivery to send. A task with no webhook of a tenant with no
// endpoint makes a skipped delivery: no wake, so tenants without webhooks
// cost the dispatcher no look per batch.
func TestNotifierReportsOnlyDeliveriesToSend(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now().UTC()
	apply := func(recsOf func(sc *script)) int {
		t.Helper()
		sc := newScript(t)
		recsOf(sc)
		calls := 0
		n := hookpg.Notifier{Tables: hookpg.LiveTables, MaxAge: time.Hour, Scheduled: func() { calls++ }}
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return n.Apply(ctx, tx, sc.records) }); err != nil {
			t.Fatal(err)
		}
		return calls
	}
	if n := apply(func(sc *script) {
		sc.add("globex", "task-quiet", now, submitted(&taskv1.TaskSpec{Name: "quiet"}))
		sc.add("globex", "task-quiet", now, started("a"))
		sc.add("globex", "task-quiet", now, succeeded("a"))
	}); n != 0 {
		t.Errorf("a batch with only a skipped delivery reported %d scheduled", n)
	}
	var states []string
	rows, err := e.pool.Query(ctx, `SELECT state FROM webhook_schedule`)
	if err != nil {
		t.Fatal(err)
	}
	if states, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(states) != 1 || states[0] != "skipped" {
		t.Fatalf("schedule after the quiet task = %v, %v; want one skipped delivery", states, err)
	}
	if n := apply(func(sc *script) {
		sc.add("globex", "task-quiet-2", now, submitted(&taskv1.TaskSpec{Name: "quiet"}))
		sc.add("acme", "task-hooked", now, submitted(&taskv1.TaskSpec{Name: "hooked", Webhook: &taskv1.Webhook{Url: "http://127.0.0.1:9/hook"}}))
		sc.add("acme", "task-hooked", now, started("b"))
		sc.add("globex", "task-quiet-2", now, started("c"))
		sc.add("acme", "task-hooked", now, succeeded("b"))
		sc.add("globex", "task-quiet-2", now, succeeded("c"))
	}); n != 1 {
		t.Errorf("a batch with a delivery to send reported %d scheduled, want 1", n)
	}
}
