// Package postgres keeps usage in Postgres: the consumer's Apply, which
// folds one task event into usage_tasks and usage_records inside the
// consumer's transaction, and the sums a report reads.
package postgres

import (
	"context"
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

// Apply folds a run of task-topic records (consumer.Apply): the states of
// their tasks are read in one statement, the events folded in order, and
// the new states and the metered quantities written in one statement each.
// It is idempotent on its own: the task's version guards the fold (in
// memory and in the upsert) and the event id keys each quantity, so a
// record seen again — a replay into the live tables, a dead letter retried
// — changes nothing.
func (m Meter) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	evs := make([]domain.Event, 0, len(recs))
	ids := make([]string, 0, len(recs))
	for _, rec := range recs {
		var env taskv1.TaskEvent
		if err := proto.Unmarshal(rec.Value, &env); err != nil {
			return fmt.Errorf("usage: decode %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		ev, err := events.Convert(&env)
		if err != nil {
			return err
		}
		evs, ids = append(evs, ev), append(ids, ev.TaskID)
	}
	tasks, records := pgx.Identifier{m.Tables.Tasks}.Sanitize(), pgx.Identifier{m.Tables.Records}.Sanitize()
	state, err := load(ctx, tx, tasks, ids)
	if err != nil {
		return err
	}
	changed := map[string]bool{}
	var metered []domain.Record
	for _, ev := range evs {
		if err := domain.Refuse(state[ev.TaskID], ev); err != nil {
			return err
		}
		next, recs, applied := domain.Fold(state[ev.TaskID], ev)
		if applied {
			state[ev.TaskID], changed[ev.TaskID] = next, true
			metered = append(metered, recs...)
		}
	}
	if err := storeTasks(ctx, tx, tasks, state, changed); err != nil {
		return err
	}
	return storeRecords(ctx, tx, records, metered)
}

const taskColumns = `task_id, tenant_id, version, type, gpus, queue, flavor, model, resolution, video_seconds, attempt_id,
	attempt_started, spec_queue, cluster_queue, stage`

func load(ctx context.Context, tx pgx.Tx, table string, ids []string) (map[string]domain.Task, error) {
	rows, err := tx.Query(ctx, `SELECT `+taskColumns+` FROM `+table+` WHERE task_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("usage: load tasks: %w", err)
	}
	out := map[string]domain.Task{}
	for rows.Next() {
		var (
			t       domain.Task
			started *time.Time
		)
		if err := rows.Scan(&t.TaskID, &t.TenantID, &t.Version, &t.Spec.Type, &t.Spec.GPUs, &t.Queue, &t.Flavor, &t.Spec.Model,
			&t.Spec.Resolution, &t.Spec.VideoSeconds, &t.AttemptID, &started, &t.Spec.Queue, &t.Spec.ClusterQueue, &t.Stage); err != nil {
			rows.Close()
			return nil, fmt.Errorf("usage: load tasks: %w", err)
		}
		if started != nil {
			t.AttemptStarted = started.UTC()
		}
		out[t.TaskID] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage: load tasks: %w", err)
	}
	return out, nil
}

// storeTasks upserts the changed tasks' states, each only over an older
// version.
func storeTasks(ctx context.Context, tx pgx.Tx, table string, state map[string]domain.Task, changed map[string]bool) error {
	if len(changed) == 0 {
		return nil
	}
	n := len(changed)
	ids, tenants, types, queues, flavors, models, res, attempts, specQ, cq := make([]string, 0, n), make([]string, 0, n),
		make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n),
		make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	versions, gpus, video := make([]int64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
	started, stages := make([]*time.Time, 0, n), make([]string, 0, n)
	for id := range changed {
		t := state[id]
		var st *time.Time
		if !t.AttemptStarted.IsZero() {
			st = &t.AttemptStarted
		}
		ids, tenants, types, queues, flavors = append(ids, t.TaskID), append(tenants, t.TenantID), append(types, t.Spec.Type),
			append(queues, t.Queue), append(flavors, t.Flavor)
		models, res, attempts, specQ, cq = append(models, t.Spec.Model), append(res, t.Spec.Resolution), append(attempts, t.AttemptID),
			append(specQ, t.Spec.Queue), append(cq, t.Spec.ClusterQueue)
		versions, gpus, video, started = append(versions, t.Version), append(gpus, t.Spec.GPUs), append(video, t.Spec.VideoSeconds),
			append(started, st)
		stages = append(stages, t.Stage)
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+table+` (`+taskColumns+`)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::float8[], $6::text[], $7::text[], $8::text[],
			$9::text[], $10::float8[], $11::text[], $12::timestamptz[], $13::text[], $14::text[], $15::text[])
		ON CONFLICT (task_id) DO UPDATE SET version = EXCLUDED.version, type = EXCLUDED.type, gpus = EXCLUDED.gpus,
			queue = EXCLUDED.queue, flavor = EXCLUDED.flavor, model = EXCLUDED.model, resolution = EXCLUDED.resolution,
			video_seconds = EXCLUDED.video_seconds, attempt_id = EXCLUDED.attempt_id, attempt_started = EXCLUDED.attempt_started,
			spec_queue = EXCLUDED.spec_queue, cluster_queue = EXCLUDED.cluster_queue, stage = EXCLUDED.stage
		WHERE `+table+`.version < EXCLUDED.version`,
		ids, tenants, versions, types, gpus, queues, flavors, models, res, video, attempts, started, specQ, cq, stages)
	if err != nil {
		return fmt.Errorf("usage: store tasks: %w", err)
	}
	return nil
}

// storeRecords inserts metered quantities; one stored before is kept.
func storeRecords(ctx context.Context, tx pgx.Tx, table string, recs []domain.Record) error {
	if len(recs) == 0 {
		return nil
	}
	n := len(recs)
	events, kinds, tenants, tasks, queues, flavors, models, res, stages := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at, qty := make([]time.Time, n), make([]float64, n)
	for i, r := range recs {
		events[i], kinds[i], tenants[i], tasks[i], queues[i], flavors[i], models[i], res[i], stages[i] = r.EventID, r.Kind, r.TenantID,
			r.TaskID, r.Queue, r.Flavor, r.Model, r.Resolution, r.Stage
		at[i], qty[i] = r.At, r.Quantity
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+table+` (event_id, kind, tenant_id, task_id, at, queue, flavor, model, resolution, stage, quantity)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::text[],
			$9::text[], $10::text[], $11::float8[])
		ON CONFLICT (event_id, kind) DO NOTHING`, events, kinds, tenants, tasks, at, queues, flavors, models, res, stages, qty)
	if err != nil {
		return fmt.Errorf("usage: store records: %w", err)
	}
	return nil
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
	domain.ByStage:  `stage`,
}

// Sums adds up the records q selects per group, kind, flavor, model,
// resolution and stage.
func (s Store) Sums(ctx context.Context, q domain.Query) ([]domain.Sum, error) {
	key, ok := groupKeys[q.GroupBy]
	if !ok {
		return nil, fmt.Errorf("usage: no grouping %q", q.GroupBy)
	}
	rows, err := s.DB.Query(ctx, `SELECT `+key+`, kind, flavor, model, resolution, stage, sum(quantity), count(*)
		FROM usage_records WHERE at >= $1 AND at < $2 AND ($3 = '' OR tenant_id = $3)
		GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6`, q.From, q.Until, q.Tenant)
	if err != nil {
		return nil, fmt.Errorf("usage: sums: %w", err)
	}
	var out []domain.Sum
	var x domain.Sum
	if _, err := pgx.ForEachRow(rows, []any{&x.Key, &x.Kind, &x.Flavor, &x.Model, &x.Resolution, &x.Stage, &x.Quantity, &x.Items}, func() error {
		out = append(out, x)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("usage: sums: %w", err)
	}
	return out, nil
}
