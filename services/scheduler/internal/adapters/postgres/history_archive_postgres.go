package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// HistoryStore is app.HistoryStore over the scheduler's tables.
type HistoryStore struct{ DB *pgxpool.Pool }

var _ app.HistoryStore = HistoryStore{}

// Archivable implements app.HistoryStore. The ended tasks are read through
// tasks_ended_idx (migration 0052); tasks an open task depends on, and
// tasks with an event the relay has not published, are left (a dependency
// must stay readable; an unpublished event must reach Kafka first).
func (s HistoryStore) Archivable(ctx context.Context, cutoff time.Time, limit int) ([]app.ArchivedTask, error) {
	rows, err := s.DB.Query(ctx, `
		SELECT t.id, t.version, t.updated_at FROM tasks t
		WHERE (t.status IN ('completed', 'failed', 'cancelled') OR t.deleted) AND t.updated_at < $1
		  AND NOT EXISTS (SELECT 1 FROM tasks p WHERE p.status = 'pending' AND NOT p.deleted
		                  AND cardinality(p.depends_on) > 0 AND t.id = ANY(p.depends_on))
		  AND EXISTS (SELECT 1 FROM outbox_checkpoints c WHERE c.relay = 'scheduler'
		              AND NOT EXISTS (SELECT 1 FROM events e WHERE e.aggregate_id = t.id AND (e.tx_id, e.id) > (c.tx_id, c.event_id)))
		ORDER BY t.updated_at, t.id
		LIMIT $2`, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("archivable tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.ArchivedTask, error) {
		var t app.ArchivedTask
		err := r.Scan(&t.ID, &t.Version, &t.UpdatedAt)
		return t, err
	})
	if err != nil || len(tasks) == 0 {
		return nil, err
	}
	ids := make([]string, len(tasks))
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		ids[i], index[t.ID] = t.ID, i
	}
	evRows, err := s.DB.Query(ctx, `SELECT aggregate_type, aggregate_id, version, event_type, event_id::text, tenant_id,
		occurred_at, payload, headers FROM events WHERE aggregate_id = ANY($1) ORDER BY aggregate_id, version`, ids)
	if err != nil {
		return nil, fmt.Errorf("archivable tasks' events: %w", err)
	}
	defer evRows.Close()
	for evRows.Next() {
		var e eventstore.Event
		if err := evRows.Scan(&e.AggregateType, &e.AggregateID, &e.Version, &e.Type, &e.EventID, &e.TenantID,
			&e.OccurredAt, &e.Payload, &e.Headers); err != nil {
			return nil, fmt.Errorf("archivable tasks' events: %w", err)
		}
		t := &tasks[index[e.AggregateID]]
		t.Events = append(t.Events, e)
	}
	if err := evRows.Err(); err != nil {
		return nil, fmt.Errorf("archivable tasks' events: %w", err)
	}
	return tasks, nil
}

// Forget implements app.HistoryStore.
func (s HistoryStore) Forget(ctx context.Context, tasks []app.ArchivedTask) (int, error) {
	ids, versions := make([]string, len(tasks)), make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i], versions[i] = t.ID, t.Version
	}
	var n int
	err := pg.InTx(ctx, s.DB, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// The version guard keeps a task that changed after it was read
		// (a failed task retried, say): its row and events stay.
		err := tx.QueryRow(ctx, `
			WITH gone AS (
				DELETE FROM tasks t USING unnest($1::text[], $2::bigint[]) AS x(id, v)
				WHERE t.id = x.id AND t.version = x.v
				RETURNING t.id, t.updated_at),
			events_gone AS (DELETE FROM events e USING gone WHERE e.aggregate_id = gone.id),
			views_gone AS (DELETE FROM task_views v USING gone WHERE v.id = gone.id),
			requests_gone AS (DELETE FROM create_requests r USING gone WHERE r.task_ids[1] = gone.id),
			horizon AS (
				UPDATE task_archive_horizon h SET updated_at = last.updated_at, task_id = last.id
				FROM (SELECT updated_at, id FROM gone ORDER BY updated_at DESC, id DESC LIMIT 1) AS last
				WHERE (last.updated_at, last.id) > (h.updated_at, h.task_id))
			SELECT count(*) FROM gone`, ids, versions).Scan(&n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("forget tasks: %w", err)
	}
	return n, nil
}

// ArchivedViews is the condition, on task_views rows, of the rows whose
// task history was archived and forgotten (at or below the horizon):
// `taskmesh replay` leaves them out of its comparison, since the topic
// still holds their events.
const ArchivedViews = `(status IN ('completed', 'failed', 'cancelled') OR deleted)
	AND (updated_at, id) <= (SELECT h.updated_at, h.task_id FROM task_archive_horizon h)`
