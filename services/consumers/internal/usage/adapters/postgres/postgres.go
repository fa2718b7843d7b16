// Package postgres keeps usage in Postgres: the consumer's Apply, which
// folds one task event into usage_tasks and usage_records inside the
// consumer's transaction, and the sums a report reads.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/adapters/events"
	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/domain"
)

// Tables names the tables a Meter writes (the live ones, or a replay's).
type Tables struct{ Tasks, Records string }

// LiveTables are the live tables.
var LiveTables = Tables{Tasks: "usage_tasks", Records: "usage_records"}

// Meter applies task events to usage.
type Meter struct{ Tables Tables }

// Apply folds one task-topic record (consumer.Apply). It is idempotent on
// its own: the task's version guards the fold and the event id keys each
// record, so a record seen again — a replay into the live tables, a dead
// letter retried — changes nothing.
func (m Meter) Apply(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
	var env taskv1.TaskEvent
	if err := proto.Unmarshal(rec.Value, &env); err != nil {
		return fmt.Errorf("usage: decode %d/%d: %w", rec.Partition, rec.Offset, err)
	}
	ev, err := events.Convert(&env)
	if err != nil {
		return err
	}
	tasks, records := pgx.Identifier{m.Tables.Tasks}.Sanitize(), pgx.Identifier{m.Tables.Records}.Sanitize()
	task, err := load(ctx, tx, tasks, ev.TaskID)
	if err != nil {
		return err
	}
	next, recs, applied := domain.Fold(task, ev)
	if !applied {
		return nil
	}
	var started *time.Time
	if !next.AttemptStarted.IsZero() {
		started = &next.AttemptStarted
	}
	s := next.Spec
	if _, err := tx.Exec(ctx, `INSERT INTO `+tasks+` (task_id, tenant_id, version, type, gpus, queue, flavor, model, resolution,
			video_seconds, attempt_id, attempt_started, spec_queue, cluster_queue)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version, type = EXCLUDED.type, gpus = EXCLUDED.gpus,
			queue = EXCLUDED.queue, flavor = EXCLUDED.flavor, model = EXCLUDED.model, resolution = EXCLUDED.resolution,
			video_seconds = EXCLUDED.video_seconds, attempt_id = EXCLUDED.attempt_id, attempt_started = EXCLUDED.attempt_started,
			spec_queue = EXCLUDED.spec_queue, cluster_queue = EXCLUDED.cluster_queue
		WHERE `+tasks+`.version < EXCLUDED.version`,
		next.TaskID, next.TenantID, next.Version, s.Type, s.GPUs, next.Queue, next.Flavor, s.Model, s.Resolution, s.VideoSeconds,
		next.AttemptID, started, s.Queue, s.ClusterQueue); err != nil {
		return fmt.Errorf("usage: store task %s: %w", next.TaskID, err)
	}
	for _, r := range recs {
		if _, err := tx.Exec(ctx, `INSERT INTO `+records+` (event_id, kind, tenant_id, task_id, at, queue, flavor, model, resolution, quantity)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (event_id, kind) DO NOTHING`,
			r.EventID, r.Kind, r.TenantID, r.TaskID, r.At, r.Queue, r.Flavor, r.Model, r.Resolution, r.Quantity); err != nil {
			return fmt.Errorf("usage: store %s of %s: %w", r.Kind, r.EventID, err)
		}
	}
	return nil
}

func load(ctx context.Context, tx pgx.Tx, table, id string) (domain.Task, error) {
	var (
		t       domain.Task
		started *time.Time
	)
	err := tx.QueryRow(ctx, `SELECT task_id, tenant_id, version, type, gpus, queue, flavor, model, resolution, video_seconds,
			attempt_id, attempt_started, spec_queue, cluster_queue FROM `+table+` WHERE task_id = $1`, id).
		Scan(&t.TaskID, &t.TenantID, &t.Version, &t.Spec.Type, &t.Spec.GPUs, &t.Queue, &t.Flavor, &t.Spec.Model, &t.Spec.Resolution,
			&t.Spec.VideoSeconds, &t.AttemptID, &started, &t.Spec.Queue, &t.Spec.ClusterQueue)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Task{}, nil
	}
	if err != nil {
		return t, fmt.Errorf("usage: load task %s: %w", id, err)
	}
	if started != nil {
		t.AttemptStarted = started.UTC()
	}
	return t, nil
}

// Store reads usage.
type Store struct{ DB *pgxpool.Pool }

// groupKeys are the SQL expressions of the groupings (constants, never
// user input).
var groupKeys = map[string]string{
	domain.ByDay:    `to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
	domain.ByModel:  `model`,
	domain.ByQueue:  `queue`,
	domain.ByFlavor: `flavor`,
	domain.ByTenant: `tenant_id`,
}

// Sums adds up the records q selects per group, kind, flavor, model and
// resolution.
func (s Store) Sums(ctx context.Context, q domain.Query) ([]domain.Sum, error) {
	key, ok := groupKeys[q.GroupBy]
	if !ok {
		return nil, fmt.Errorf("usage: no grouping %q", q.GroupBy)
	}
	rows, err := s.DB.Query(ctx, `SELECT `+key+`, kind, flavor, model, resolution, sum(quantity), count(*)
		FROM usage_records WHERE at >= $1 AND at < $2 AND ($3 = '' OR tenant_id = $3)
		GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5`, q.From, q.Until, q.Tenant)
	if err != nil {
		return nil, fmt.Errorf("usage: sums: %w", err)
	}
	var out []domain.Sum
	var x domain.Sum
	if _, err := pgx.ForEachRow(rows, []any{&x.Key, &x.Kind, &x.Flavor, &x.Model, &x.Resolution, &x.Quantity, &x.Items}, func() error {
		out = append(out, x)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("usage: sums: %w", err)
	}
	return out, nil
}
