// Package postgres keeps the scheduler's state in Postgres: task events in
// the event store and, in the same transaction, the tasks row (the inline
// projection claims and single-task reads decide from), plus the claim and
// create idempotency tables and the agents' heartbeats.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// AggregateType of task events in the event store.
const AggregateType = "task"

// Querier is a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var events = eventstore.New()

const taskColumns = `doc`

// scanTasks reads rows of a single doc column.
func scanTasks(rows pgx.Rows) ([]domain.Task, error) {
	defer rows.Close()
	var out []domain.Task
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return nil, err
		}
		var t domain.Task
		if err := codec.DecodeTask(doc, &t); err != nil {
			return nil, fmt.Errorf("decode task doc: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Get returns a task of tenant (any tenant when tenant is "*"); deleted
// tasks are not found.
func Get(ctx context.Context, q Querier, tenant, id string) (domain.Task, error) {
	rows, err := q.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1 AND ($2 = '*' OR tenant_id = $2) AND NOT deleted`, id, tenant)
	if err != nil {
		return domain.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	ts, err := scanTasks(rows)
	if err != nil {
		return domain.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	if len(ts) == 0 {
		return domain.Task{}, domain.ErrNotFound
	}
	return ts[0], nil
}

// Lock loads a task for update inside tx (any tenant when tenant is "*").
func Lock(ctx context.Context, tx pgx.Tx, tenant, id string) (domain.Task, error) {
	rows, err := tx.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1 AND ($2 = '*' OR tenant_id = $2) AND NOT deleted FOR UPDATE`, id, tenant)
	if err != nil {
		return domain.Task{}, fmt.Errorf("lock task %s: %w", id, err)
	}
	ts, err := scanTasks(rows)
	if err != nil {
		return domain.Task{}, fmt.Errorf("lock task %s: %w", id, err)
	}
	if len(ts) == 0 {
		return domain.Task{}, domain.ErrNotFound
	}
	return ts[0], nil
}

// Change is one task's new events.
type Change struct {
	Before  domain.Task // zero for a new task
	Records []domain.Record
	// Traces, when set, holds each record's trace context (commands batched
	// together come from different requests); otherwise ctx's is used.
	Traces []map[string]string
}

// statement is SQL with its arguments, to execute or to queue in a
// pipeline.
type statement struct {
	sql  string
	args []any
}

// plan turns changes into the events to append, the statements that write
// the tasks rows, and the tasks after the changes. Trace context is stored
// with the events so Kafka consumers continue the caller's trace.
func plan(ctx context.Context, changes []Change) ([]eventstore.Event, []statement, []domain.Task, error) {
	trace := otel.Inject(ctx)
	var evs []eventstore.Event
	after := make([]domain.Task, 0, len(changes))
	for _, c := range changes {
		t := c.Before
		for i, r := range c.Records {
			t = domain.Apply(t, r)
			id := uuid.NewString()
			trace := trace
			if i < len(c.Traces) {
				trace = c.Traces[i]
			}
			payload, err := codec.Marshal(id, t.ID, t.TenantID, t.Version, r, trace)
			if err != nil {
				return nil, nil, nil, err
			}
			evs = append(evs, eventstore.Event{AggregateType: AggregateType, AggregateID: t.ID, Version: t.Version,
				Type: r.Event.EventName(), EventID: id, TenantID: t.TenantID, OccurredAt: r.At, Payload: payload, Headers: trace})
		}
		after = append(after, t)
	}
	if len(evs) == 0 {
		return nil, nil, after, nil
	}
	// New tasks are inserted; existing ones updated in place (cheaper than
	// an upsert's speculative insertion).
	var (
		created, changed []domain.Task
		specChanged      []bool
		stmts            []statement
	)
	for i, c := range changes {
		if c.Before.Version == 0 {
			created = append(created, after[i])
			continue
		}
		changed = append(changed, after[i])
		updatedSpec := false
		for _, r := range c.Records {
			if _, ok := r.Event.(domain.Updated); ok {
				updatedSpec = true
			}
		}
		specChanged = append(specChanged, updatedSpec)
	}
	for _, build := range []func() (statement, error){
		func() (statement, error) { return upsertStatement(created) },
		func() (statement, error) { return updateStatement(changed, specChanged) },
	} {
		st, err := build()
		if err != nil {
			return nil, nil, nil, err
		}
		if st.sql != "" {
			stmts = append(stmts, st)
		}
	}
	return evs, stmts, after, nil
}

// Save appends the events of every change and writes the tasks rows, all
// in tx, and returns the tasks after the changes.
func Save(ctx context.Context, tx pgx.Tx, changes ...Change) ([]domain.Task, error) {
	evs, stmts, after, err := plan(ctx, changes)
	if err != nil {
		return nil, err
	}
	if err := events.Append(ctx, tx, evs...); err != nil {
		return nil, err
	}
	for _, st := range stmts {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return nil, fmt.Errorf("write tasks: %w", err)
		}
	}
	return after, nil
}

// Upsert writes tasks rows from their state (also used to rebuild them).
func Upsert(ctx context.Context, tx pgx.Tx, tasks ...domain.Task) error {
	st, err := upsertStatement(tasks)
	if err != nil || st.sql == "" {
		return err
	}
	if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
		return fmt.Errorf("write tasks: %w", err)
	}
	return nil
}

// updateStatement writes the new state of existing tasks; the columns
// copied from the spec are refreshed only where specChanged (TaskUpdated is
// rare).
func updateStatement(tasks []domain.Task, specChanged []bool) (statement, error) {
	if len(tasks) == 0 {
		return statement{}, nil
	}
	n := len(tasks)
	ids, statuses, agents, amachines, attempts, preempted := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	prios := make([]int32, n)
	leases, timeouts := make([]*time.Time, n), make([]*time.Time, n)
	retries, updated := make([]time.Time, n), make([]time.Time, n)
	deleted, waiting := make([]bool, n), make([]bool, n)
	versions := make([]int64, n)
	docs := make([][]byte, n)
	for i, t := range tasks {
		doc, err := json.Marshal(t)
		if err != nil {
			return statement{}, fmt.Errorf("encode task %s: %w", t.ID, err)
		}
		ids[i], statuses[i], agents[i], amachines[i], attempts[i], preempted[i] = t.ID, string(t.Status), t.AgentID, t.AssignedMachine, t.AttemptID, t.PreemptedBy
		prios[i], leases[i], timeouts[i] = int32(t.Spec.Priority), optTime(t.LeaseExpiresAt), timeoutAt(t)
		retries[i], updated[i], deleted[i], versions[i], docs[i] = t.RetryAt, t.UpdatedAt, t.Deleted, t.Version, doc
		waiting[i] = t.AwaitingAdmission()
	}
	// The spec columns (type, targets, labels, dependencies, group) are read
	// from the doc only where the spec changed.
	return statement{`
		UPDATE tasks t SET status = x.st, priority = x.pr, agent_id = x.ag, assigned_machine_id = x.am, attempt_id = x.att,
			lease_expires_at = x.le, timeout_at = x.tu, retry_at = x.re, preempted_by = x.pb, updated_at = x.up,
			deleted = x.de, version = x.ve, doc = x.doc, awaiting_admission = x.aw,
			type = CASE WHEN x.sc THEN x.doc->'spec'->>'type' ELSE t.type END,
			machine_id = CASE WHEN x.sc THEN coalesce(x.doc->'spec'->>'machine_id', '') ELSE t.machine_id END,
			target_ip = CASE WHEN x.sc THEN coalesce(x.doc->'spec'->>'target_ip', '') ELSE t.target_ip END,
			group_id = CASE WHEN x.sc THEN coalesce(x.doc->'spec'->>'group_id', '') ELSE t.group_id END,
			labels = CASE WHEN x.sc THEN ARRAY(SELECT json_array_elements_text(coalesce(x.doc->'spec'->'labels', '[]'::json))) ELSE t.labels END,
			depends_on = CASE WHEN x.sc THEN ARRAY(SELECT json_array_elements_text(coalesce(x.doc->'spec'->'depends_on', '[]'::json))) ELSE t.depends_on END
		FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::timestamptz[],
			$9::timestamptz[], $10::text[], $11::timestamptz[], $12::bool[], $13::bigint[], $14::json[], $15::bool[], $16::bool[])
			AS x(id, st, pr, ag, am, att, le, tu, re, pb, up, de, ve, doc, sc, aw)
		WHERE t.id = x.id`,
		[]any{ids, statuses, prios, agents, amachines, attempts, leases, timeouts, retries, preempted, updated, deleted, versions, docs,
			specChanged, waiting}}, nil
}

func timeoutAt(t domain.Task) *time.Time {
	if t.Status != domain.StatusRunning || t.StartedAt.IsZero() {
		return nil
	}
	at := t.StartedAt.Add(time.Duration(t.Spec.Timeout+t.Spec.GracePeriod) * time.Second)
	return &at
}

// upsertStatement inserts (or replaces) tasks rows from their state.
func upsertStatement(tasks []domain.Task) (statement, error) {
	if len(tasks) == 0 {
		return statement{}, nil
	}
	n := len(tasks)
	var (
		ids, tenants, statuses, types, machines, ips, fanouts, groups = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		agents, amachines, attempts, preempted                        = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		prios                                                         = make([]int32, n)
		labels, deps                                                  = make([][]string, n), make([][]string, n)
		scatter, deleted, waiting                                     = make([]bool, n), make([]bool, n), make([]bool, n)
		leases, timeouts                                              = make([]*time.Time, n), make([]*time.Time, n)
		retries, created, updated                                     = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		versions                                                      = make([]int64, n)
		docs                                                          = make([][]byte, n)
	)
	for i, t := range tasks {
		doc, err := json.Marshal(t)
		if err != nil {
			return statement{}, fmt.Errorf("encode task %s: %w", t.ID, err)
		}
		ids[i], tenants[i], statuses[i], types[i] = t.ID, t.TenantID, string(t.Status), t.Spec.Type
		machines[i], ips[i], fanouts[i], groups[i] = t.Spec.MachineID, t.Spec.TargetIP, t.FanoutID, t.Spec.GroupID
		agents[i], amachines[i], attempts[i], preempted[i] = t.AgentID, t.AssignedMachine, t.AttemptID, t.PreemptedBy
		prios[i], labels[i], deps[i] = int32(t.Spec.Priority), nonNil(t.Spec.Labels), nonNil(t.Spec.DependsOn)
		scatter[i], deleted[i], waiting[i] = t.Spec.Mode == domain.ModeScatter, t.Deleted, t.AwaitingAdmission()
		leases[i], timeouts[i] = optTime(t.LeaseExpiresAt), timeoutAt(t)
		retries[i], created[i], updated[i], versions[i], docs[i] = t.RetryAt, t.CreatedAt, t.UpdatedAt, t.Version, doc
	}
	return statement{`
		INSERT INTO tasks (id, tenant_id, status, priority, type, machine_id, target_ip, labels, depends_on,
			fanout_id, scatter, group_id, agent_id, assigned_machine_id, attempt_id, lease_expires_at, timeout_at,
			retry_at, preempted_by, created_at, updated_at, deleted, version, doc, awaiting_admission)
		SELECT id, tn, st, pr, ty, ma, ip, lb::text[], dp::text[], fo, sc, gr, ag, am, att, le, tu, re, pb, cr, up, de, ve, doc, aw
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::bool[], $12::text[], $13::text[], $14::text[], $15::text[],
			$16::timestamptz[], $17::timestamptz[], $18::timestamptz[], $19::text[], $20::timestamptz[],
			$21::timestamptz[], $22::bool[], $23::bigint[], $24::json[], $25::bool[])
			AS x(id, tn, st, pr, ty, ma, ip, lb, dp, fo, sc, gr, ag, am, att, le, tu, re, pb, cr, up, de, ve, doc, aw)
		ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, priority = EXCLUDED.priority, type = EXCLUDED.type,
			machine_id = EXCLUDED.machine_id, target_ip = EXCLUDED.target_ip, labels = EXCLUDED.labels,
			depends_on = EXCLUDED.depends_on, fanout_id = EXCLUDED.fanout_id, scatter = EXCLUDED.scatter,
			group_id = EXCLUDED.group_id, agent_id = EXCLUDED.agent_id, assigned_machine_id = EXCLUDED.assigned_machine_id,
			attempt_id = EXCLUDED.attempt_id, lease_expires_at = EXCLUDED.lease_expires_at, timeout_at = EXCLUDED.timeout_at,
			retry_at = EXCLUDED.retry_at, preempted_by = EXCLUDED.preempted_by, updated_at = EXCLUDED.updated_at,
			deleted = EXCLUDED.deleted, version = EXCLUDED.version, doc = EXCLUDED.doc,
			awaiting_admission = EXCLUDED.awaiting_admission`,
		[]any{ids, tenants, statuses, prios, types, machines, ips, textArray(labels), textArray(deps), fanouts, scatter, groups,
			agents, amachines, attempts, leases, timeouts, retries, preempted, created, updated, deleted, versions, docs, waiting}}, nil
}

// textArray encodes a list of lists as Postgres array literals, because a
// text[] column filled from unnest needs one text value per row.
func textArray(lists [][]string) []string {
	out := make([]string, len(lists))
	for i, l := range lists {
		b := []byte{'{'}
		for j, s := range l {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			for _, r := range []byte(s) {
				if r == '"' || r == '\\' {
					b = append(b, '\\')
				}
				b = append(b, r)
			}
			b = append(b, '"')
		}
		out[i] = string(append(b, '}'))
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// IsConflict reports an optimistic-concurrency conflict on a task.
func IsConflict(err error) bool { return errors.Is(err, eventstore.ErrConflict) }

// SameDoc reports whether two task states serialize identically (what the
// tasks.doc column would hold).
func SameDoc(a, b domain.Task) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// Traced is a recorded event with the trace context of the request that
// caused it.
type Traced struct {
	domain.Record
	Trace map[string]string
}

// TaskStore is the pg.KeyedStore of tasks: batches of commands lock their
// tasks with one query and write every change with one event append and
// one row statement, pipelined.
type TaskStore struct{}

// Lock loads and locks the tasks (any tenant; deleted ones are absent).
func (TaskStore) Lock(ids []string) (string, []any, func(pgx.Rows) (map[string]domain.Task, error)) {
	return `SELECT doc FROM tasks WHERE id = ANY($1::text[]) AND NOT deleted ORDER BY id FOR UPDATE`, []any{ids},
		func(rows pgx.Rows) (map[string]domain.Task, error) {
			ts, err := scanTasks(rows)
			if err != nil {
				return nil, fmt.Errorf("lock tasks: %w", err)
			}
			out := make(map[string]domain.Task, len(ts))
			for _, t := range ts {
				out[t.ID] = t
			}
			return out, nil
		}
}

// Queue adds a batch's writes to b.
func (TaskStore) Queue(b *pgx.Batch, changes []pg.KeyedChange[domain.Task, Traced]) (func(error) error, error) {
	list := make([]Change, len(changes))
	for i, c := range changes {
		ch := Change{Before: c.Before, Records: make([]domain.Record, len(c.Events)), Traces: make([]map[string]string, len(c.Events))}
		for j, e := range c.Events {
			ch.Records[j], ch.Traces[j] = e.Record, e.Trace
		}
		list[i] = ch
	}
	evs, stmts, _, err := plan(context.Background(), list)
	if err != nil {
		return nil, err
	}
	if err := events.QueueAppend(b, evs...); err != nil {
		return nil, err
	}
	for _, st := range stmts {
		b.Queue(st.sql, st.args...)
	}
	return func(err error) error {
		if pg.IsUniqueViolation(err, "events_aggregate_version_key") {
			return eventstore.AppendError(err, evs) // a typed conflict: the batch is decided again
		}
		return fmt.Errorf("write tasks: %w", err)
	}, nil
}
