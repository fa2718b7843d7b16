// Package views builds the scheduler's read models from the Kafka task
// topic (projection handlers for platform/projection): task_views for lists
// and searches, audit_logs for the audit trail. Both derive every value from
// the events, so a replay into fresh tables reproduces them exactly.
package views

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// TaskViews projects task events into table (normally "task_views").
type TaskViews struct{ Table string }

// Apply folds a batch into the views. Each task's row is read once, the
// batch's events are applied in order with a version guard (an event at or
// below the row's version was applied before and is skipped), and the
// changed rows are written with one statement.
func (v TaskViews) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	byTask := map[string][]domain.Record{}
	versions := map[string][]int64{}
	var order []string
	for _, rec := range records {
		env, r, err := codec.Unmarshal(rec.Value)
		if err != nil {
			return fmt.Errorf("task_views: record %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		id := env.GetAggregateId()
		if _, ok := byTask[id]; !ok {
			order = append(order, id)
		}
		byTask[id] = append(byTask[id], r)
		versions[id] = append(versions[id], env.GetVersion())
	}
	table := pgx.Identifier{v.Table}.Sanitize()
	// No row locks: the runner holding the projection's lock is the only
	// writer of these rows.
	rows, err := tx.Query(ctx, `SELECT doc FROM `+table+` WHERE id = ANY($1::text[])`, order)
	if err != nil {
		return fmt.Errorf("task_views: load: %w", err)
	}
	current := map[string]domain.Task{}
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			rows.Close()
			return err
		}
		var t domain.Task
		if err := codec.DecodeTask(doc, &t); err != nil {
			rows.Close()
			return fmt.Errorf("task_views: decode: %w", err)
		}
		current[t.ID] = t
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var created, changed []domain.Task
	for _, id := range order {
		t, before := current[id], current[id].Version
		for i, r := range byTask[id] {
			if versions[id][i] <= t.Version {
				continue // applied before: replay or redelivery
			}
			t = domain.Apply(t, r)
			t.Version = versions[id][i]
		}
		switch {
		case t.Version == before:
		case before == 0:
			created = append(created, t)
		default:
			changed = append(changed, t)
		}
	}
	if err := upsertViews(ctx, tx, table, created); err != nil {
		return err
	}
	return updateViews(ctx, tx, table, changed)
}

// updateViews rewrites existing rows (cheaper than an upsert).
func updateViews(ctx context.Context, tx pgx.Tx, table string, tasks []domain.Task) error {
	if len(tasks) == 0 {
		return nil
	}
	n := len(tasks)
	ids, statuses, amachines := make([]string, n), make([]string, n), make([]string, n)
	names, types, machines, groups := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	prios := make([]int32, n)
	updated := make([]any, n)
	deleted := make([]bool, n)
	versions := make([]int64, n)
	docs := make([][]byte, n)
	for i, t := range tasks {
		doc, err := json.Marshal(t)
		if err != nil {
			return err
		}
		ids[i], statuses[i], amachines[i], prios[i] = t.ID, string(t.Status), t.AssignedMachine, int32(t.Spec.Priority)
		names[i], types[i], machines[i], groups[i] = t.Spec.Name, t.Spec.Type, t.Spec.MachineID, t.Spec.GroupID
		updated[i], deleted[i], versions[i], docs[i] = t.UpdatedAt, t.Deleted, t.Version, doc
	}
	_, err := tx.Exec(ctx, `
		UPDATE `+table+` v SET status = x.st, priority = x.pr, assigned_machine_id = x.am, updated_at = x.up,
			deleted = x.de, version = x.ve, doc = x.doc, name = x.na, type = x.ty, machine_id = x.ma, group_id = x.gr
		FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::timestamptz[], $6::bool[], $7::bigint[], $8::json[],
			$9::text[], $10::text[], $11::text[], $12::text[])
			AS x(id, st, pr, am, up, de, ve, doc, na, ty, ma, gr)
		WHERE v.id = x.id AND v.version < x.ve`,
		ids, statuses, prios, amachines, updated, deleted, versions, docs, names, types, machines, groups)
	if err != nil {
		return fmt.Errorf("task_views: update: %w", err)
	}
	return nil
}

func upsertViews(ctx context.Context, tx pgx.Tx, table string, tasks []domain.Task) error {
	if len(tasks) == 0 {
		return nil
	}
	n := len(tasks)
	ids, tenants, statuses, types, names, machines, amachines, groups := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	prios := make([]int32, n)
	created, updated := make([]any, n), make([]any, n)
	deleted := make([]bool, n)
	versions := make([]int64, n)
	docs := make([][]byte, n)
	for i, t := range tasks {
		doc, err := json.Marshal(t)
		if err != nil {
			return err
		}
		ids[i], tenants[i], statuses[i], types[i], names[i] = t.ID, t.TenantID, string(t.Status), t.Spec.Type, t.Spec.Name
		machines[i], amachines[i], groups[i], prios[i] = t.Spec.MachineID, t.AssignedMachine, t.Spec.GroupID, int32(t.Spec.Priority)
		created[i], updated[i], deleted[i], versions[i], docs[i] = t.CreatedAt, t.UpdatedAt, t.Deleted, t.Version, doc
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO `+table+` (id, tenant_id, status, priority, type, name, machine_id, assigned_machine_id, group_id,
			created_at, updated_at, deleted, version, doc)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::timestamptz[], $11::timestamptz[], $12::bool[], $13::bigint[], $14::json[])
		ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, priority = EXCLUDED.priority, type = EXCLUDED.type,
			name = EXCLUDED.name, machine_id = EXCLUDED.machine_id, assigned_machine_id = EXCLUDED.assigned_machine_id,
			group_id = EXCLUDED.group_id, updated_at = EXCLUDED.updated_at, deleted = EXCLUDED.deleted,
			version = EXCLUDED.version, doc = EXCLUDED.doc
		WHERE `+table+`.version < EXCLUDED.version`,
		ids, tenants, statuses, prios, types, names, machines, amachines, groups, created, updated, deleted, versions, docs)
	if err != nil {
		return fmt.Errorf("task_views: write: %w", err)
	}
	return nil
}
