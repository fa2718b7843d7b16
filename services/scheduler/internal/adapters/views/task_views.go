package views

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/domain/eventseq"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// TaskChange is the operation on one task_views row: fold these events, in
// order, into the row. Version is each event's aggregate version; the
// store skips events at or below the row's version (already applied).
type TaskChange struct {
	TaskID string
	Events []VersionedRecord
}

// VersionedRecord is an event with its aggregate version and tenant (the
// envelope's).
type VersionedRecord struct {
	Version  int64
	TenantID string
	Record   domain.Record
}

// ConvertTaskViews groups a batch's events by task, tasks in the order they
// first appear and each task's events in topic order (one task's events
// share a partition, so topic order is version order).
func ConvertTaskViews(events []Event) []TaskChange {
	index := make(map[string]int, len(events))
	var changes []TaskChange
	for _, e := range events {
		id := e.Envelope.GetAggregateId()
		i, ok := index[id]
		if !ok {
			i = len(changes)
			index[id] = i
			changes = append(changes, TaskChange{TaskID: id})
		}
		changes[i].Events = append(changes[i].Events, VersionedRecord{Version: e.Envelope.GetVersion(),
			TenantID: e.Envelope.GetTenantId(), Record: e.Record})
	}
	return changes
}

// FoldTaskViews applies changes to the rows as stored (current, by task id;
// a task without a row is absent) with the scheduler's fold, domain.Apply.
// It returns the rows to insert (tasks new to the table) and the rows to
// rewrite, each at the version of its last event applied; a task whose
// events were all applied before is in neither. An event out of its task's
// sequence (checkSequence) fails the fold: the runner then parks that
// record as a dead letter and applies the others.
func FoldTaskViews(current map[string]domain.Task, changes []TaskChange) (created, changed []domain.Task, err error) {
	for _, c := range changes {
		t := current[c.TaskID]
		before := t.Version
		for _, e := range c.Events {
			if e.Version >= 1 && e.Version <= t.Version {
				continue // applied before: a replay or a redelivery
			}
			if err := checkSequence(t, c.TaskID, e); err != nil {
				return nil, nil, err
			}
			t = domain.Apply(t, e.Record)
			t.Version = e.Version
		}
		switch {
		case t.Version == before:
		case before == 0:
			created = append(created, t)
		default:
			changed = append(changed, t)
		}
	}
	return created, changed, nil
}

// checkSequence refuses an event that cannot be the next of task id, whose
// row (t; Version 0 when it has none) holds the events before it: the
// sequence rule of every read model (eventseq.Next, a submission creating
// the task), and task_views' own: a task's first event is its submission,
// of that task and its tenant.
func checkSequence(t domain.Task, id string, e VersionedRecord) error {
	refuse := func(reason string) error {
		return fmt.Errorf("task_views: %s event version %d of task %s %s", e.Record.Event.EventName(), e.Version, id, reason)
	}
	sub, isSubmission := e.Record.Event.(domain.Submitted)
	if _, err := eventseq.Next(t.Version, t.TenantID, eventseq.Event{Version: e.Version, Tenant: e.TenantID, Creates: isSubmission}); err != nil {
		return refuse("is refused: " + err.Error())
	}
	switch {
	case t.Version == 0 && !isSubmission:
		return refuse("is refused: a task's first event is its submission")
	case isSubmission && (sub.ID != id || sub.TenantID != e.TenantID):
		return refuse(fmt.Sprintf("submits task %s of tenant %q under the envelope's tenant %q", sub.ID, sub.TenantID, e.TenantID))
	}
	return nil
}

// TaskViewStore writes task_views rows (Table).
type TaskViewStore struct{ Table string }

// Store applies changes: each task's row is read once, FoldTaskViews folds
// the batch's events into it, and the new rows and the changed rows are
// written with one statement each. Both statements only replace a row with
// a newer version, so storing the same changes twice writes nothing the
// second time.
func (s TaskViewStore) Store(ctx context.Context, tx pgx.Tx, changes []TaskChange) error {
	if len(changes) == 0 {
		return nil
	}
	table := pgx.Identifier{s.Table}.Sanitize()
	ids := make([]string, len(changes))
	for i, c := range changes {
		ids[i] = c.TaskID
	}
	current, err := loadViews(ctx, tx, table, ids)
	if err != nil {
		return err
	}
	created, changed, err := FoldTaskViews(current, changes)
	if err != nil {
		return err
	}
	if err := insertViews(ctx, tx, table, created); err != nil {
		return err
	}
	return updateViews(ctx, tx, table, changed)
}

// loadViews reads the rows of ids. No row locks: the runner holding the
// projection's lock is the only writer of these rows.
func loadViews(ctx context.Context, tx pgx.Tx, table string, ids []string) (map[string]domain.Task, error) {
	rows, err := tx.Query(ctx, `SELECT doc FROM `+table+` WHERE id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("task_views: load: %w", err)
	}
	defer rows.Close()
	current := make(map[string]domain.Task, len(ids))
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return nil, fmt.Errorf("task_views: load: %w", err)
		}
		var t domain.Task
		if err := codec.DecodeTask(doc, &t); err != nil {
			return nil, fmt.Errorf("task_views: decode: %w", err)
		}
		current[t.ID] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("task_views: load: %w", err)
	}
	return current, nil
}

// clean makes a value storable in a text column (pg.CleanText): a task
// whose name carries a NUL byte is listed with U+FFFD in its place instead
// of failing the projection, and the same on replay.
func clean(s string) string { return pg.CleanText(s) }

// viewDoc is the row's doc: the task as JSON. Go's encoder already turns
// invalid UTF-8 into U+FFFD; a NUL it writes as the escape \u0000, which a
// json column takes but jsonb (or a cast to it) refuses, so that escape
// becomes U+FFFD as well — the character itself, as the encoder writes it
// for a task read back from the row, so that a row folded from the events
// in one go (a replay) and one folded event by event (live) are the same
// text.
func viewDoc(t domain.Task) ([]byte, error) {
	doc, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return cleanNULEscapes(doc), nil
}

// cleanNULEscapes replaces every \u0000 escape of a JSON text with U+FFFD.
// Escapes are
// read in pairs from each backslash, so an escaped backslash followed by
// "u0000" (the text \u0000 in a string) is left alone.
func cleanNULEscapes(doc []byte) []byte {
	nul := []byte(`\u0000`)
	if !bytes.Contains(doc, nul) {
		return doc
	}
	out := make([]byte, 0, len(doc))
	for i := 0; i < len(doc); i++ {
		switch {
		case doc[i] != '\\' || i+1 == len(doc):
			out = append(out, doc[i])
		case bytes.HasPrefix(doc[i:], nul):
			out = append(out, "\uFFFD"...)
			i += len(nul) - 1
		default:
			out = append(out, doc[i], doc[i+1])
			i++
		}
	}
	return out
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
		doc, err := viewDoc(t)
		if err != nil {
			return err
		}
		ids[i], statuses[i], amachines[i], prios[i] = clean(t.ID), string(t.Status), clean(t.AssignedMachine), int32(t.Spec.Priority)
		names[i], types[i], machines[i], groups[i] = clean(t.Spec.Name), clean(t.Spec.Type), clean(t.Spec.MachineID), clean(t.Spec.GroupID)
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

// insertViews writes rows for tasks new to the table. It is an upsert all
// the same, guarded by version, in case a row appeared since it was read.
func insertViews(ctx context.Context, tx pgx.Tx, table string, tasks []domain.Task) error {
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
		doc, err := viewDoc(t)
		if err != nil {
			return err
		}
		ids[i], tenants[i], statuses[i], types[i], names[i] = clean(t.ID), clean(t.TenantID), string(t.Status), clean(t.Spec.Type), clean(t.Spec.Name)
		machines[i], amachines[i], groups[i], prios[i] = clean(t.Spec.MachineID), clean(t.AssignedMachine), clean(t.Spec.GroupID), int32(t.Spec.Priority)
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
