package scheduler_test

import (
	"context"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// A loaded history is indistinguishable from one the scheduler wrote: the
// tasks rows equal their rebuild from the events, task_views equals its
// replay from the topic the relay published, the relay and the projection
// start where the history ends, and a scheduler started on it carries on.
func TestLoadedHistoryIsConsistent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	db := pgtest.New(t)
	pool, err := pg.Open(ctx, pg.Config{URL: db.URL, Schema: scheduler.Schema, MaxConns: 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	broker := kafkatest.New(t, kafkatest.WithPartitions(4))
	now := time.Now()
	spec := scheduler.HistorySpec{Finished: 900, Pending: 100, Tenants: 5, Span: 7 * 24 * time.Hour, Now: now, Seed: 7, BatchSize: 128}
	rep, err := scheduler.LoadHistory(ctx, pool, spec)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tasks != 1000 || rep.Events < 4*900+100 {
		t.Fatalf("loaded %d tasks, %d events; want 1000 tasks and at least %d events", rep.Tasks, rep.Events, 4*900+100)
	}
	if rep.PerTenant[scheduler.HistoryTenant(0)] <= rep.PerTenant[scheduler.HistoryTenant(4)] {
		t.Errorf("tenant shares %v: the first tenant should have the most", rep.PerTenant)
	}

	// What the statuses and times look like.
	var finished, pending, failed, cancelled, waitingForLabels int
	var oldest, newest time.Time
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled')),
		count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'failed'),
		count(*) FILTER (WHERE status = 'cancelled'), count(*) FILTER (WHERE status = 'pending' AND labels = $1::text[]),
		min(created_at), max(created_at) FROM tasks`, scheduler.BacklogLabels).
		Scan(&finished, &pending, &failed, &cancelled, &waitingForLabels, &oldest, &newest)
	if err != nil {
		t.Fatal(err)
	}
	if finished != 900 || pending != 100 || waitingForLabels != 100 || failed == 0 || cancelled == 0 {
		t.Errorf("tasks: %d finished (%d failed, %d cancelled), %d pending (%d needing the backlog's labels)",
			finished, failed, cancelled, pending, waitingForLabels)
	}
	if oldest.After(now.Add(-6*24*time.Hour)) || newest.After(now) {
		t.Errorf("created from %s to %s; want spread over the week before %s", oldest, newest, now)
	}
	var views int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM task_views`).Scan(&views); err != nil {
		t.Fatal(err)
	}
	if views != 1000 {
		t.Errorf("%d task_views rows, want 1000", views)
	}

	// The inline projection equals its rebuild from the events.
	rebuilt, err := scheduler.RebuildInlineProjection(ctx, pool, false)
	if err != nil {
		t.Fatal(err)
	}
	if rebuilt.Tasks != 1000 || rebuilt.Events != rep.Events || len(rebuilt.Differences) != 0 {
		t.Errorf("rebuild: %d tasks from %d events, %d differ (%v); want 1000 from %d, none differing",
			rebuilt.Tasks, rebuilt.Events, len(rebuilt.Differences), rebuilt.Differences, rep.Events)
	}

	// Published by the relay; task_views equals its replay from the topic.
	topic := "history.tasks"
	if err := scheduler.PublishHistory(ctx, pool, broker.Config(), topic, 4, nil); err != nil {
		t.Fatal(err)
	}
	specs := scheduler.ReplaySpecs(broker.Config())
	specs[0].Topic = topic
	replayed, err := projection.Replay(ctx, pool, specs[0])
	if err != nil {
		t.Fatal(err)
	}
	if replayed.Records != int64(rep.Events) || !replayed.Equal() {
		t.Errorf("replay: %d records (want %d), tables %+v", replayed.Records, rep.Events, replayed.Tables)
	}
	// Publishing again finds nothing new to publish.
	if err := scheduler.PublishHistory(ctx, pool, broker.Config(), topic, 4, nil); err != nil {
		t.Fatal(err)
	}
	replayed, err = projection.Replay(ctx, pool, specs[0])
	if err != nil {
		t.Fatal(err)
	}
	if replayed.Records != int64(rep.Events) {
		t.Errorf("after a second publish the topic holds %d events, want %d", replayed.Records, rep.Events)
	}

	// A scheduler on the loaded database: a new task is projected (the
	// projection carries on from the history's end) and listed first.
	e := newEnvOn(t, pool, broker, func(c *scheduler.Config) { c.Topic = topic })
	created, err := taskv1.NewTaskServiceClient(e.conn).CreateTask(user(scheduler.HistoryTenant(0)),
		&taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "after-history", Command: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := taskv1.NewTaskServiceClient(e.conn).ListTasks(user(scheduler.HistoryTenant(0)), &taskv1.ListTasksRequest{PageSize: 5})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetTasks()) > 0 && list.GetTasks()[0].GetId() == created.GetTask().GetId() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new task is not listed first: %v", list.GetTasks())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var views2 int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM task_views`).Scan(&views2); err != nil {
		t.Fatal(err)
	}
	if views2 != 1001 {
		t.Errorf("%d task_views rows after one more task, want 1001", views2)
	}
}

// PublishHistory publishes the whole history when its transaction ids
// pass a power of ten (999 → 1000 …): it orders them as numbers, not as
// the text "999" after "1000", which stopped it halfway through a
// million-task history with the rest left to the first relay after it.
func TestPublishHistoryOrdersTransactionsAsNumbers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	db := pgtest.New(t)
	pool, err := pg.Open(ctx, pg.Config{URL: db.URL, Schema: scheduler.Schema, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	broker := kafkatest.New(t, kafkatest.WithPartitions(4))
	// Four transactions of 50 tasks.
	rep, err := scheduler.LoadHistory(ctx, pool, scheduler.HistorySpec{Finished: 200, Tenants: 3, Seed: 3, BatchSize: 50, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Renumber the four transactions 998 … 1001, keeping their order:
	// every one of them below the server's oldest running transaction,
	// as a finished history is (the server is moved past 1001 first).
	for {
		var xid int64
		if err := pool.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		if xid > 1010 {
			break
		}
	}
	_, err = pool.Exec(ctx, `WITH txs AS (SELECT tx_id, 997 + dense_rank() OVER (ORDER BY tx_id) AS renumbered FROM (SELECT DISTINCT tx_id FROM events) d)
		UPDATE events e SET tx_id = txs.renumbered::text::xid8 FROM txs WHERE e.tx_id = txs.tx_id`)
	if err != nil {
		t.Fatal(err)
	}
	var txs []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(DISTINCT tx_id::text ORDER BY tx_id::text) FROM events`).Scan(&txs); err != nil {
		t.Fatal(err)
	}
	if len(txs) != 4 || txs[0] != "1000" || txs[3] != "999" {
		t.Fatalf("transactions %v; want 998 to 1001", txs)
	}

	last, found, err := scheduler.LastPosition(ctx, pool)
	if err != nil || !found {
		t.Fatalf("last position: %v (found %v)", err, found)
	}
	if last.TxID != 1001 {
		t.Errorf("the history's last position is %s; want one of transaction 1001", last)
	}

	topic := "history.digits"
	if err := scheduler.PublishHistory(ctx, pool, broker.Config(), topic, 4, nil); err != nil {
		t.Fatal(err)
	}
	var checkpoint string
	if err := pool.QueryRow(ctx, `SELECT tx_id::text || ':' || event_id FROM outbox_checkpoints WHERE relay = 'scheduler'`).Scan(&checkpoint); err != nil {
		t.Fatal(err)
	}
	if checkpoint != last.String() {
		t.Errorf("the relay's checkpoint is %s; want the history's last event %s", checkpoint, last)
	}
	specs := scheduler.ReplaySpecs(broker.Config())
	specs[0].Topic = topic
	replayed, err := projection.Replay(ctx, pool, specs[0])
	if err != nil {
		t.Fatal(err)
	}
	if replayed.Records != int64(rep.Events) {
		t.Errorf("the topic holds %d events, want all %d of the history", replayed.Records, rep.Events)
	}
}
