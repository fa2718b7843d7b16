// Package postgres keeps the scheduler's state in Postgres and implements
// the app layer's storage interfaces over it: task events in the event
// store and, in the same transaction, the tasks row (the inline projection
// claims and single-task reads decide from) — TaskStore; the claim and
// create idempotency tables; the agents' heartbeats (Agents); the
// sweeper's queries (SweepQueries) and lock (SweeperLock); the task_views
// read model (TaskViews); and the LISTEN/NOTIFY link that wakes claims on
// other replicas (Wakeups).
//
// Batching is this package's business: changes to existing tasks and
// plain creations go through a pg.KeyedBatcher (one lock query, one event
// append and one row statement per batch, pipelined), and the writes that
// need a transaction of their own (claims, idempotent or fanned-out
// creations) through a pg.GroupCommitter.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
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
	return pg.CollectDocs(rows, "task doc", codec.DecodeTask)
}

// getSQL reads task $1 of tenant $2 (any tenant when $2 is "*"); deleted
// tasks are not found.
const getSQL = `SELECT ` + taskColumns + ` FROM tasks WHERE id = $1 AND ($2 = '*' OR tenant_id = $2) AND NOT deleted`

// Get returns a task of tenant (any tenant when tenant is "*"); deleted
// tasks are not found.
func Get(ctx context.Context, q Querier, tenant, id string) (domain.Task, error) {
	rows, err := q.Query(ctx, getSQL, id, tenant)
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

// GetMany implements app.TaskStore.
func (s *TaskStore) GetMany(ctx context.Context, tenant string, ids []string) ([]domain.Task, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ANY($1::text[]) AND ($2 = '*' OR tenant_id = $2) AND NOT deleted`,
		ids, tenant)
	if err != nil {
		return nil, fmt.Errorf("get %d tasks: %w", len(ids), err)
	}
	ts, err := scanTasks(rows)
	if err != nil {
		return nil, fmt.Errorf("get %d tasks: %w", len(ids), err)
	}
	return ts, nil
}

// change is one task's new events.
type change struct {
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
func plan(ctx context.Context, changes []change) ([]eventstore.Event, []statement, []domain.Task, error) {
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
	// Dependencies: the tasks written waiting for theirs are checked once
	// written, and the waiting dependents of the tasks that completed are
	// released.
	var waiting, completed []string
	j := 0 // index into specChanged, which has an entry per existing task
	for i, c := range changes {
		t, newList := after[i], c.Before.Version == 0
		if !newList {
			newList = specChanged[j]
			j++
		}
		switch {
		case newList && awaitsDependencies(t):
			waiting = append(waiting, t.ID)
		case t.Status == domain.StatusCompleted && c.Before.Status != domain.StatusCompleted:
			completed = append(completed, t.ID)
		}
	}
	stmts = append(stmts, dependencyStatements(waiting, dependenciesOf(after, waiting), completed)...)
	return evs, stmts, after, nil
}

// awaitsDependencies is the value a written task's
// awaiting_dependencies starts with: a pending task with dependencies
// waits until dependencyStatements finds them all completed.
func awaitsDependencies(t domain.Task) bool {
	return t.Status == domain.StatusPending && !t.Deleted && len(t.Spec.DependsOn) > 0
}

// dependenciesOf lists the dependencies of the tasks with the given ids.
func dependenciesOf(tasks []domain.Task, ids []string) []string {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var out []string
	for _, t := range tasks {
		if want[t.ID] {
			out = append(out, t.Spec.DependsOn...)
		}
	}
	return out
}

// dependencyStatements keep awaiting_dependencies true exactly while a
// pending task has a dependency that did not complete, without a window
// in which a task stays held back for good:
//
//   - waiting (tasks just written waiting, with their dependencies deps):
//     the dependencies are locked FOR KEY SHARE first, so a transaction
//     completing one of them either committed before (the check, a later
//     statement with a later snapshot, sees it completed) or waits for
//     this one to commit (and then finds the task among the dependents);
//   - completed (tasks this transaction completed): their waiting
//     dependents that still have a dependency to wait for are locked
//     first, so of two transactions completing a task's last two
//     dependencies the second waits for the first, and its check sees
//     both completed. Those released at once are locked by the release
//     itself: a fan-out's children are written once.
//
// A lock taken here, after the batch's own, can meet another
// transaction's in the other order; the deadlock Postgres then reports
// is retried (TaskStore's writers).
//
// Claims still check the dependencies themselves (unmetDependency): the
// flag only keeps the tasks it holds back out of the claim indexes.
func dependencyStatements(waiting, deps, completed []string) []statement {
	var out []statement
	if len(waiting) > 0 {
		if len(deps) > 0 {
			out = append(out, statement{`SELECT 1 FROM tasks WHERE id = ANY($1::text[]) ORDER BY id FOR KEY SHARE`, []any{deps}})
		}
		out = append(out, statement{`UPDATE tasks t SET awaiting_dependencies = false
			WHERE t.id = ANY($1::text[]) AND t.awaiting_dependencies AND NOT EXISTS (` + unmetDependency + `)`, []any{waiting}})
	}
	if len(completed) > 0 {
		out = append(out, statement{`SELECT 1 FROM tasks t WHERE t.awaiting_dependencies AND t.depends_on && $1::text[]
			AND EXISTS (` + unmetDependency + `) ORDER BY t.id FOR UPDATE`, []any{completed}})
		out = append(out, statement{`UPDATE tasks t SET awaiting_dependencies = false
			WHERE t.awaiting_dependencies AND t.depends_on && $1::text[] AND NOT EXISTS (` + unmetDependency + `)`, []any{completed}})
	}
	return out
}

// save appends the events of every change and writes the tasks rows, all
// in tx, and returns the tasks after the changes. The statements are
// keyed, so they run on their generic plans (pg.QueueKeyedPlans), and they
// travel in one round trip; the statements after them plan as before.
func save(ctx context.Context, tx pgx.Tx, changes ...change) ([]domain.Task, error) {
	evs, stmts, after, err := plan(ctx, changes)
	if err != nil || len(evs) == 0 && len(stmts) == 0 {
		return after, err
	}
	b := &pgx.Batch{}
	pg.QueueKeyedPlans(b)
	if err := events.QueueAppend(b, evs...); err != nil {
		return nil, err
	}
	appended := len(evs) > 0
	for _, st := range stmts {
		b.Queue(st.sql, st.args...)
	}
	pg.QueueDefaultPlans(b)
	br := tx.SendBatch(ctx, b)
	for i := range b.Len() {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			switch {
			case i == 1 && appended:
				return nil, eventstore.AppendError(err, evs)
			case i == 0 || i >= b.Len()-2:
				return nil, fmt.Errorf("write tasks: planning settings: %w", err)
			}
			return nil, fmt.Errorf("write tasks: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("write tasks: %w", err)
	}
	return after, nil
}

// Upsert writes tasks rows from their state (also used to rebuild them).
func Upsert(ctx context.Context, tx pgx.Tx, tasks ...domain.Task) error {
	st, err := upsertStatement(tasks)
	if err != nil || st.sql == "" {
		return err
	}
	var waiting []string
	for _, t := range tasks {
		if awaitsDependencies(t) {
			waiting = append(waiting, t.ID)
		}
	}
	for _, st := range append([]statement{st}, dependencyStatements(waiting, dependenciesOf(tasks, waiting), nil)...) {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("write tasks: %w", err)
		}
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
	deleted, waiting, waitingDeps, held := make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)
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
		waiting[i], waitingDeps[i], held[i] = t.AwaitingAdmission(), awaitsDependencies(t), t.HeldForDependencies
	}
	// The spec columns (type, targets, labels, dependencies, group) are read
	// from the doc only where the spec changed.
	return statement{`
		UPDATE tasks t SET status = x.st, priority = x.pr, agent_id = x.ag, assigned_machine_id = x.am, attempt_id = x.att,
			lease_expires_at = x.le, timeout_at = x.tu, retry_at = x.re, preempted_by = x.pb, updated_at = x.up,
			deleted = x.de, version = x.ve, doc = x.doc, awaiting_admission = x.aw, held_for_dependencies = x.hd,
			-- Only a pending task waits for its dependencies; a new list of
			-- them is checked again (dependencyStatements).
			awaiting_dependencies = CASE WHEN x.st <> 'pending' OR x.de THEN false
				WHEN x.sc THEN x.ad ELSE t.awaiting_dependencies END,
			type = CASE WHEN x.sc THEN x.doc->'spec'->>'type' ELSE t.type END,
			machine_id = CASE WHEN x.sc THEN coalesce(x.doc->'spec'->>'machine_id', '') ELSE t.machine_id END,
			target_ip = CASE WHEN x.sc THEN coalesce(x.doc->'spec'->>'target_ip', '') ELSE t.target_ip END,
			group_id = CASE WHEN x.sc THEN coalesce(x.doc->'spec'->>'group_id', '') ELSE t.group_id END,
			labels = CASE WHEN x.sc THEN ARRAY(SELECT json_array_elements_text(coalesce(x.doc->'spec'->'labels', '[]'::json))) ELSE t.labels END,
			depends_on = CASE WHEN x.sc THEN ARRAY(SELECT json_array_elements_text(coalesce(x.doc->'spec'->'depends_on', '[]'::json))) ELSE t.depends_on END
		FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::timestamptz[],
			$9::timestamptz[], $10::text[], $11::timestamptz[], $12::bool[], $13::bigint[], $14::json[], $15::bool[], $16::bool[],
			$17::bool[], $18::bool[])
			AS x(id, st, pr, ag, am, att, le, tu, re, pb, up, de, ve, doc, sc, aw, ad, hd)
		WHERE t.id = x.id`,
		[]any{ids, statuses, prios, agents, amachines, attempts, leases, timeouts, retries, preempted, updated, deleted, versions, docs,
			specChanged, waiting, waitingDeps, held}}, nil
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
		scatter, deleted, waiting, waitingDeps, held                  = make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n), make([]bool, n)
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
		waitingDeps[i], held[i] = awaitsDependencies(t), t.HeldForDependencies
		leases[i], timeouts[i] = optTime(t.LeaseExpiresAt), timeoutAt(t)
		retries[i], created[i], updated[i], versions[i], docs[i] = t.RetryAt, t.CreatedAt, t.UpdatedAt, t.Version, doc
	}
	return statement{`
		INSERT INTO tasks (id, tenant_id, status, priority, type, machine_id, target_ip, labels, depends_on,
			fanout_id, scatter, group_id, agent_id, assigned_machine_id, attempt_id, lease_expires_at, timeout_at,
			retry_at, preempted_by, created_at, updated_at, deleted, version, doc, awaiting_admission, awaiting_dependencies,
			held_for_dependencies)
		SELECT id, tn, st, pr, ty, ma, ip, lb::text[], dp::text[], fo, sc, gr, ag, am, att, le, tu, re, pb, cr, up, de, ve, doc, aw, ad, hd
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::bool[], $12::text[], $13::text[], $14::text[], $15::text[],
			$16::timestamptz[], $17::timestamptz[], $18::timestamptz[], $19::text[], $20::timestamptz[],
			$21::timestamptz[], $22::bool[], $23::bigint[], $24::json[], $25::bool[], $26::bool[], $27::bool[])
			AS x(id, tn, st, pr, ty, ma, ip, lb, dp, fo, sc, gr, ag, am, att, le, tu, re, pb, cr, up, de, ve, doc, aw, ad, hd)
		ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, priority = EXCLUDED.priority, type = EXCLUDED.type,
			machine_id = EXCLUDED.machine_id, target_ip = EXCLUDED.target_ip, labels = EXCLUDED.labels,
			depends_on = EXCLUDED.depends_on, fanout_id = EXCLUDED.fanout_id, scatter = EXCLUDED.scatter,
			group_id = EXCLUDED.group_id, agent_id = EXCLUDED.agent_id, assigned_machine_id = EXCLUDED.assigned_machine_id,
			attempt_id = EXCLUDED.attempt_id, lease_expires_at = EXCLUDED.lease_expires_at, timeout_at = EXCLUDED.timeout_at,
			retry_at = EXCLUDED.retry_at, preempted_by = EXCLUDED.preempted_by, updated_at = EXCLUDED.updated_at,
			deleted = EXCLUDED.deleted, version = EXCLUDED.version, doc = EXCLUDED.doc,
			awaiting_admission = EXCLUDED.awaiting_admission, awaiting_dependencies = EXCLUDED.awaiting_dependencies,
			held_for_dependencies = EXCLUDED.held_for_dependencies`,
		[]any{ids, tenants, statuses, prios, types, machines, ips, textArray(labels), textArray(deps), fanouts, scatter, groups,
			agents, amachines, attempts, leases, timeouts, retries, preempted, created, updated, deleted, versions, docs, waiting,
			waitingDeps, held}}, nil
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

// isConflict reports an optimistic-concurrency conflict on a task.
func isConflict(err error) bool { return errors.Is(err, eventstore.ErrConflict) }

// retryable: a batch decided on stale state (isConflict), or aborted only
// because of another transaction's locks (a deadlock), is decided again.
func retryable(err error) bool { return isConflict(err) || pg.IsSerializationFailure(err) }

// SameDoc reports whether two task states serialize identically (what the
// tasks.doc column would hold).
func SameDoc(a, b domain.Task) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// traced is a recorded event with the trace context of the request that
// caused it.
type traced struct {
	domain.Record
	Trace map[string]string
}

// taskRows is the pg.KeyedStore of tasks: batches of commands lock their
// tasks with one query and write every change with one event append and
// one row statement, pipelined.
type taskRows struct{}

// Lock loads and locks the tasks (any tenant; deleted ones are absent).
func (taskRows) Lock(ids []string) (string, []any, func(pgx.Rows) (map[string]domain.Task, error)) {
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
func (taskRows) Queue(b *pgx.Batch, changes []pg.KeyedChange[domain.Task, traced]) (func(error) error, error) {
	list := make([]change, len(changes))
	for i, c := range changes {
		ch := change{Before: c.Before, Records: make([]domain.Record, len(c.Events)), Traces: make([]map[string]string, len(c.Events))}
		for j, e := range c.Events {
			ch.Records[j], ch.Traces[j] = e.Record, e.Trace
		}
		list[i] = ch
	}
	return queueChanges(b, list)
}

// queueChanges adds the event append and the row statements of changes
// to b, and returns how a batch maps their errors: a duplicate event
// version is a typed conflict (the batch is decided again).
func queueChanges(b *pgx.Batch, changes []change) (func(error) error, error) {
	evs, stmts, _, err := plan(context.Background(), changes)
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
			return eventstore.AppendError(err, evs)
		}
		return fmt.Errorf("write tasks: %w", err)
	}, nil
}

// TaskStore is app.TaskStore over Postgres.
type TaskStore struct {
	pool    *pgxpool.Pool
	gc      *pg.GroupCommitter
	batcher *pg.KeyedBatcher[domain.Task, traced]
	// requests runs the creations with a request id
	// (create_requests_postgres.go).
	requests *pg.KeyedBatcher[createRequest, change]
}

// TaskStoreOptions tunes a TaskStore's writers.
type TaskStoreOptions struct {
	// Writers sets how many write transactions run at once (default 4):
	// Writers/2 (at least one) each for batched changes and plain
	// creations, for creations with a request id, and for claims and the
	// other creations (WriterConns).
	Writers int
	// AfterCommit, if set, runs after every committed write (it wakes the
	// outbox relay).
	AfterCommit func()
}

// WriterConns is how many connections a TaskStore's writers hold at once
// with TaskStoreOptions.Writers = writers.
func WriterConns(writers int) int {
	if writers <= 0 {
		writers = 4
	}
	return 3 * max(1, writers/2)
}

// NewTaskStore starts the store's writers; Close stops them.
func NewTaskStore(pool *pgxpool.Pool, o TaskStoreOptions) *TaskStore {
	if o.Writers <= 0 {
		o.Writers = 4
	}
	workers := max(1, o.Writers/2)
	return &TaskStore{
		pool: pool,
		gc:   pg.NewGroupCommitter(pool, pg.GroupCommitOptions{Workers: workers, MaxBatch: 128, AfterCommit: o.AfterCommit}),
		batcher: pg.NewKeyedBatcher[domain.Task, traced](pool, taskRows{}, pg.KeyedBatcherOptions{
			Workers: workers, MaxBatch: 256, Retryable: retryable, AfterCommit: o.AfterCommit,
			// The lock, the event append and the task writes are keyed
			// (TestTaskWritesRunOnKeyedPlans).
			KeyedPlans: true}),
		requests: pg.NewKeyedBatcher[createRequest, change](pool, requestRows{}, pg.KeyedBatcherOptions{
			Workers: workers, MaxBatch: 128, Retryable: retryable, AfterCommit: o.AfterCommit, KeyedPlans: true}),
	}
}

// Close stops taking writes, finishes the queued ones and waits for them.
func (s *TaskStore) Close() {
	s.gc.Close()
	s.batcher.Close()
	s.requests.Close()
}

// stopping marks the writers' "closed" as app.ErrStopping.
func stopping(err error) error {
	if err != nil && errors.Is(err, pg.ErrCommitterClosed) {
		return fmt.Errorf("%w: %w", app.ErrStopping, err)
	}
	return err
}

// Get implements app.TaskStore, on the statement's keyed plan
// (pg.QueryKeyed): a read by id, the API's and the agents' most frequent.
func (s *TaskStore) Get(ctx context.Context, tenant, id string) (domain.Task, error) {
	var ts []domain.Task
	err := pg.QueryKeyed(ctx, s.pool, func(rows pgx.Rows) (err error) {
		ts, err = scanTasks(rows)
		return err
	}, getSQL, id, tenant)
	if err != nil {
		return domain.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	if len(ts) == 0 {
		return domain.Task{}, domain.ErrNotFound
	}
	return ts[0], nil
}

// Mutate implements app.TaskStore: the decision joins the set-based
// batches. The events carry the trace context of ctx, so Kafka consumers
// continue the caller's trace even when a batch mixes callers.
func (s *TaskStore) Mutate(ctx context.Context, id string, decide func(t domain.Task) ([]domain.Record, error)) (domain.Task, error) {
	trace := otel.Inject(ctx)
	out, err := s.batcher.Do(ctx, id, func(t domain.Task, found bool) (domain.Task, []traced, error) {
		if !found {
			return t, nil, domain.ErrNotFound
		}
		recs, err := decide(t)
		if err != nil {
			return t, nil, err
		}
		events := make([]traced, len(recs))
		for i, r := range recs {
			t = domain.Apply(t, r)
			events[i] = traced{Record: r, Trace: trace}
		}
		return t, events, nil
	})
	return out, stopping(err)
}

// Create implements app.TaskStore. One task without a request id — the
// common case — joins the set-based batches; a create with a request id
// joins the batches of such creates (createWithRequest); several tasks
// without one (all or none) take a group-committed transaction.
func (s *TaskStore) Create(ctx context.Context, n app.NewTasks) ([]domain.Task, error) {
	if len(n.Tasks) == 1 && n.RequestID == "" {
		recs := n.Tasks[0]
		if _, err := submittedID(recs); err != nil {
			return nil, err
		}
		t := domain.Fold(recs)
		trace := otel.Inject(ctx)
		events := make([]traced, len(recs))
		for i, r := range recs {
			events[i] = traced{Record: r, Trace: trace}
		}
		out, err := s.batcher.Do(ctx, t.ID, func(_ domain.Task, found bool) (domain.Task, []traced, error) {
			if found {
				return domain.Task{}, nil, fmt.Errorf("task id %s already exists", t.ID)
			}
			return t, events, nil
		})
		if err != nil {
			return nil, stopping(err)
		}
		return []domain.Task{out}, nil
	}
	ids := make([]string, len(n.Tasks))
	changes := make([]change, len(n.Tasks))
	for i, recs := range n.Tasks {
		id, err := submittedID(recs)
		if err != nil {
			return nil, err
		}
		ids[i], changes[i] = id, change{Records: recs}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if n.RequestID != "" {
		return s.createWithRequest(ctx, n, changes)
	}
	var created []domain.Task
	err := s.gc.Do(ctx, ids[0], func(ctx context.Context, tx pgx.Tx) error {
		var err error
		created, err = save(ctx, tx, changes...)
		return err
	})
	if err != nil {
		return nil, stopping(err)
	}
	return created, nil
}

// submittedID is the id of the new task recs make, which must start with
// its TaskSubmitted.
func submittedID(recs []domain.Record) (string, error) {
	if len(recs) == 0 {
		return "", errors.New("create tasks: a new task needs its TaskSubmitted")
	}
	sub, ok := recs[0].Event.(domain.Submitted)
	if !ok {
		return "", fmt.Errorf("create tasks: a new task starts with TaskSubmitted, not %s", recs[0].Event.EventName())
	}
	return sub.ID, nil
}

// Claim implements app.TaskStore in one group-committed transaction: the
// prior claim, the candidates (locked with SKIP LOCKED, so concurrent
// claims never wait for, or get, the same task), the leases and the claim
// record commit together.
func (s *TaskStore) Claim(ctx context.Context, agentID, requestID string, f app.ClaimFilter,
	lease func(candidates []domain.Task) ([][]domain.Record, error)) ([]domain.Task, error) {
	var out []domain.Task
	err := s.gc.Do(ctx, "agent/"+agentID, func(ctx context.Context, tx pgx.Tx) error {
		out = nil // a retried transaction starts over
		if prior, ok, err := priorClaim(ctx, tx, agentID, requestID); err != nil || ok {
			if err == nil {
				out, err = getMany(ctx, tx, prior)
			}
			return err
		}
		candidates, err := claimCandidates(ctx, tx, agentID, f)
		if err != nil || len(candidates) == 0 {
			return err
		}
		leases, err := lease(candidates)
		if err != nil {
			return err
		}
		changes := make([]change, 0, len(candidates))
		for i, t := range candidates {
			if i < len(leases) && len(leases[i]) > 0 {
				changes = append(changes, change{Before: t, Records: leases[i]})
			}
		}
		out, err = save(ctx, tx, changes...)
		if err != nil {
			return err
		}
		ids := make([]string, len(out))
		for i, t := range out {
			ids[i] = t.ID
		}
		return recordClaim(ctx, tx, agentID, requestID, ids, f.Now)
	})
	if err != nil {
		return nil, stopping(err)
	}
	return out, nil
}

// MissingTasks implements app.TaskStore.
func (s *TaskStore) MissingTasks(ctx context.Context, tenant string, ids []string) ([]string, error) {
	return missingTasks(ctx, s.pool, tenant, ids)
}

// TasksNamed implements app.TaskStore.
func (s *TaskStore) TasksNamed(ctx context.Context, tenant string, requestIDs []string) (map[string]string, error) {
	return tasksNamed(ctx, s.pool, tenant, requestIDs)
}

// VideoTasksCreatedBefore implements app.TaskStore.
func (s *TaskStore) VideoTasksCreatedBefore(ctx context.Context, before time.Time, limit int) ([]domain.Task, error) {
	return videoTasksCreatedBefore(ctx, s.pool, before, limit)
}

// DecodeTaskDoc reads a tasks.doc value (for tests and tools that read
// rows directly).
func DecodeTaskDoc(doc []byte) (domain.Task, error) {
	var t domain.Task
	err := codec.DecodeTask(doc, &t)
	return t, err
}
