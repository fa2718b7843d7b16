package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// Aggregate types of the orchestration events in the event store; the
// relay publishes them to the orchestration topic.
const (
	GroupAggregateType    = "task_group"
	TemplateAggregateType = "template"
)

// GroupStore is the orchestration app's GroupStore over Postgres: group
// events in the event store and, in the same transaction, the task_groups
// row, the task_group_members rows, and the member tasks (events and rows,
// written as the task store writes them).
type GroupStore struct {
	DB *pgxpool.Pool
	// AfterCommit, if set, runs after every committed write (it wakes the
	// outbox relay).
	AfterCommit func()
}

// inTx runs fn in a transaction (writeTx).
func (s *GroupStore) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return writeTx(ctx, s.DB, s.AfterCommit, fn)
}

// Create implements oapp.GroupStore.
func (s *GroupStore) Create(ctx context.Context, n oapp.NewGroup) (orch.State, []domain.Task, error) {
	var (
		out     orch.State
		written []domain.Task
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		g := n.State.Group
		if g.RequestID != "" {
			var prior string
			err := tx.QueryRow(ctx, `INSERT INTO task_groups (id, tenant_id, request_id, name, mode, status, created_at, updated_at, version, doc)
				VALUES ($1, $2, $3, '', '', '', now(), now(), 0, '{}')
				ON CONFLICT (tenant_id, request_id) WHERE request_id <> '' DO UPDATE SET request_id = EXCLUDED.request_id
				RETURNING id`, g.ID, g.TenantID, g.RequestID).Scan(&prior)
			if err != nil {
				return fmt.Errorf("create task group: %w", err)
			}
			if prior != g.ID {
				// The tenant used the request id before: that group.
				written = nil
				var err error
				out, err = loadGroup(ctx, tx, g.TenantID, prior, oapp.All, false)
				return err
			}
		}
		var err error
		written, err = persist(ctx, tx, orch.State{}, n.State, n.Decision, nil)
		out = n.State
		return err
	})
	return out, written, err
}

// Get implements oapp.GroupStore.
func (s *GroupStore) Get(ctx context.Context, tenant, id string, scope oapp.Scope) (orch.State, error) {
	return loadGroup(ctx, s.DB, tenant, id, scope, false)
}

// Changed implements oapp.GroupStore: the members changed after since,
// through the (group_id, version) index.
func (s *GroupStore) Changed(ctx context.Context, tenant, id string, since int64) (orch.State, error) {
	return loadGroupWhere(ctx, s.DB, tenant, id, false, ` AND version > $2`, since)
}

// Mutate implements oapp.GroupStore.
//
// The facts are read without locking the member tasks (a pass over a
// large group would otherwise hold every one of them), so a task may end
// between the read and the decision's write. A decision that cancels a
// task its facts showed open but which has ended by the time it is locked
// was made on a group that is no longer so (a cancel racing the last
// member's completion): the transaction is rolled back and the decision
// made again on the tasks as they are then.
func (s *GroupStore) Mutate(ctx context.Context, tenant, id string, scope oapp.Scope,
	decide func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error)) (orch.State, []domain.Task, error) {
	var (
		out     orch.State
		written []domain.Task
	)
	for attempt := 1; ; attempt++ {
		// The last attempt takes the tasks as it finds them.
		strict := attempt < maxAttempts
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			before, err := loadGroup(ctx, tx, tenant, id, scope, true)
			if err != nil {
				return err
			}
			facts, err := loadFacts(ctx, tx, before)
			if err != nil {
				return err
			}
			after, d, err := decide(before, facts)
			if err != nil {
				return err
			}
			out, written = after, nil
			if d.Empty() {
				out = before
				return nil
			}
			if !strict {
				facts = nil
			}
			written, err = persist(ctx, tx, before, after, d, facts)
			return err
		})
		if !errors.Is(err, errMovedOn) {
			return out, written, err
		}
	}
}

// errMovedOn: a member task the decision cancels ended after its facts
// were read (Mutate).
var errMovedOn = errors.New("a member task ended while its group decided")

// Querier is what reads need.
type groupQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadGroup reads a group (locking its row with forUpdate) and its members
// of scope.
func loadGroup(ctx context.Context, q groupQuerier, tenant, id string, scope oapp.Scope, forUpdate bool) (orch.State, error) {
	if scope == oapp.Open {
		return loadGroupWhere(ctx, q, tenant, id, forUpdate, ` AND status NOT IN ('completed', 'failed', 'cancelled')`)
	}
	return loadGroupWhere(ctx, q, tenant, id, forUpdate, "")
}

// loadGroupWhere reads a group (locking its row with forUpdate) and its
// member rows that also match members (a condition on them, its
// arguments from $2 on).
func loadGroupWhere(ctx context.Context, q groupQuerier, tenant, id string, forUpdate bool, members string, args ...any) (orch.State, error) {
	lock := ""
	if forUpdate {
		lock = " FOR UPDATE"
	}
	var doc []byte
	err := q.QueryRow(ctx, `SELECT doc FROM task_groups WHERE id = $1 AND ($2 = '*' OR tenant_id = $2) AND NOT deleted`+lock,
		id, tenant).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return orch.State{}, domain.ErrNotFound
	}
	if err != nil {
		return orch.State{}, fmt.Errorf("get task group %s: %w", id, err)
	}
	s := orch.State{Members: map[string]orch.Member{}}
	if err := gojson.Unmarshal(doc, &s.Group); err != nil {
		return orch.State{}, fmt.Errorf("decode task group %s: %w", id, err)
	}
	rows, err := q.Query(ctx, `SELECT doc FROM task_group_members WHERE group_id = $1`+members, append([]any{id}, args...)...)
	if err != nil {
		return orch.State{}, fmt.Errorf("get members of task group %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return orch.State{}, err
		}
		var m orch.Member
		if err := gojson.Unmarshal(doc, &m); err != nil {
			return orch.State{}, fmt.Errorf("decode member of task group %s: %w", id, err)
		}
		s.Members[m.Key] = m
	}
	return s, rows.Err()
}

// loadFacts reads the tasks of the group's released members as loaded
// (the open ones, or with Scope All every one); a task that is deleted or
// missing has no facts. Only a task whose status is not
// the one the group last recorded has its times and error read from its
// document: on a large group most members have not moved since the last
// pass, and reading inside a thousand documents each pass would cost more
// than everything else the pass does. The others repeat the group's own
// record of them.
func loadFacts(ctx context.Context, q groupQuerier, s orch.State) (map[string]orch.Facts, error) {
	var ids, seen []string
	known := map[string]orch.Member{}
	for _, m := range s.Members {
		if m.Released() {
			ids, seen = append(ids, m.TaskID), append(seen, string(m.Status))
			known[m.TaskID] = m
		}
	}
	facts := make(map[string]orch.Facts, len(ids))
	if len(ids) == 0 {
		return facts, nil
	}
	rows, err := q.Query(ctx, `SELECT t.id, t.status, t.status <> m.seen,
			CASE WHEN t.status <> m.seen THEN t.doc->>'started_at' END,
			CASE WHEN t.status <> m.seen THEN t.doc->>'ended_at' END,
			CASE WHEN t.status <> m.seen THEN t.doc->>'error' END
		FROM unnest($1::text[], $2::text[]) AS m(id, seen) JOIN tasks t ON t.id = m.id AND NOT t.deleted`, ids, seen)
	if err != nil {
		return nil, fmt.Errorf("member tasks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, status        string
			moved             bool
			started, ended, e *string
		)
		if err := rows.Scan(&id, &status, &moved, &started, &ended, &e); err != nil {
			return nil, fmt.Errorf("member tasks: %w", err)
		}
		if !moved {
			m := known[id]
			facts[id] = orch.Facts{Status: m.Status, StartedAt: m.StartedAt, EndedAt: m.EndedAt, Error: m.Error}
			continue
		}
		f := orch.Facts{Status: domain.Status(status), StartedAt: parseTime(started), EndedAt: parseTime(ended)}
		if e != nil {
			f.Error = *e
		}
		facts[id] = f
	}
	return facts, rows.Err()
}

func parseTime(s *string) time.Time {
	if s == nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// persist stores a decision on a group in tx: its records as events (the
// versions after before's), the member tasks it creates, cancels or
// deletes, the group row and the member rows that changed. It returns the
// tasks it wrote. facts are what the decision was made on (nil: nothing
// is checked against them; see memberTasks).
func persist(ctx context.Context, tx pgx.Tx, before, after orch.State, d orch.Decision, facts map[string]orch.Facts) ([]domain.Task, error) {
	g := after.Group
	trace := otel.Inject(ctx)
	evs := make([]eventstore.Event, len(d.Records))
	for i, r := range d.Records {
		id := uuid.NewString()
		v := before.Group.Version + int64(i) + 1
		payload, err := codec.MarshalOrchestration(id, g.ID, g.TenantID, v, r, trace)
		if err != nil {
			return nil, err
		}
		if len(payload) > eventstore.MaxPayload {
			return nil, &domain.InvalidError{Field: "tasks", Reason: fmt.Sprintf(
				"the group's %s event would be %d KiB; at most %d KiB (fewer or smaller tasks)", r.Event.EventName(),
				len(payload)>>10, eventstore.MaxPayload>>10)}
		}
		evs[i] = eventstore.Event{AggregateType: GroupAggregateType, AggregateID: g.ID, Version: v, Type: r.Event.EventName(),
			EventID: id, TenantID: g.TenantID, OccurredAt: r.At, Payload: payload, Headers: trace}
	}
	if err := events.Append(ctx, tx, evs...); err != nil {
		return nil, err
	}
	written, err := memberTasks(ctx, tx, d, facts)
	if err != nil {
		return nil, err
	}
	if err := writeGroup(ctx, tx, g); err != nil {
		return nil, err
	}
	return written, writeMembers(ctx, tx, before, after)
}

// memberTasks creates, cancels, deletes and retries the decision's tasks,
// by the task aggregate's rules, and returns the tasks as written. A task
// to cancel that has ended is left as it ended; when facts showed it
// open, the decision was made on a task that moved on since, and
// memberTasks returns errMovedOn instead. A task to retry that is gone is
// domain.ErrNotFound, one the task's rules do not let retry
// domain.ErrImmutable. A retry carries the address of the client who asked
// for it, as RetryTask's own records do.
func memberTasks(ctx context.Context, tx pgx.Tx, d orch.Decision, facts map[string]orch.Facts) ([]domain.Task, error) {
	changes := make([]change, 0, len(d.NewTasks)+len(d.CancelTasks)+len(d.DeleteTasks)+len(d.RetryTasks))
	for _, recs := range d.NewTasks {
		changes = append(changes, change{Records: recs})
	}
	if len(d.CancelTasks) > 0 || len(d.DeleteTasks) > 0 || len(d.RetryTasks) > 0 {
		last := d.Records[len(d.Records)-1]
		ids := make([]string, 0, len(d.CancelTasks)+len(d.DeleteTasks)+len(d.RetryTasks))
		for id := range d.CancelTasks {
			ids = append(ids, id)
		}
		ids = append(ids, d.DeleteTasks...)
		ids = append(ids, d.RetryTasks...)
		rows, err := tx.Query(ctx, `SELECT doc FROM tasks WHERE id = ANY($1::text[]) AND NOT deleted ORDER BY id FOR UPDATE`, ids)
		if err != nil {
			return nil, fmt.Errorf("lock member tasks: %w", err)
		}
		tasks, err := scanTasks(rows)
		if err != nil {
			return nil, fmt.Errorf("lock member tasks: %w", err)
		}
		retry := make(map[string]bool, len(d.RetryTasks))
		for _, id := range d.RetryTasks {
			retry[id] = false // not found yet
		}
		for _, t := range tasks {
			if _, ok := retry[t.ID]; ok {
				retry[t.ID] = true
			}
		}
		for id, found := range retry {
			if !found {
				return nil, fmt.Errorf("member task %s: %w", id, domain.ErrNotFound)
			}
		}
		for _, t := range tasks {
			var recs []domain.Record
			if retry[t.ID] {
				if recs, err = t.Retry(last.At, last.Actor); err != nil {
					return nil, err
				}
				for i := range recs {
					recs[i].IP = last.IP
				}
			} else if reason, ok := d.CancelTasks[t.ID]; ok {
				recs, err = t.Cancel(last.At, last.Actor, reason)
				if errors.Is(err, domain.ErrImmutable) {
					if f, ok := facts[t.ID]; ok && !f.Gone && !f.Status.Final() {
						return nil, fmt.Errorf("member task %s is %s: %w", t.ID, t.Status, errMovedOn)
					}
					continue // final already: it stays as it ended
				}
			} else {
				recs, err = t.Delete(last.At, last.Actor)
			}
			if err != nil {
				return nil, fmt.Errorf("member task %s: %w", t.ID, err)
			}
			changes = append(changes, change{Before: t, Records: recs})
		}
	}
	if len(changes) == 0 {
		return nil, nil
	}
	return save(ctx, tx, changes...)
}

// writeGroup upserts the group row.
func writeGroup(ctx context.Context, tx pgx.Tx, g orch.Group) error {
	doc, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("encode task group %s: %w", g.ID, err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO task_groups (id, tenant_id, request_id, name, mode, status, created_at, updated_at,
			wake_at, deleted, version, doc)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, mode = EXCLUDED.mode, status = EXCLUDED.status,
			created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, wake_at = EXCLUDED.wake_at,
			deleted = EXCLUDED.deleted, version = EXCLUDED.version, doc = EXCLUDED.doc`,
		g.ID, g.TenantID, g.RequestID, g.Name, string(g.Mode), string(g.Status), g.CreatedAt, g.UpdatedAt,
		optTime(g.NextWake()), g.Deleted, g.Version, doc)
	if err != nil {
		return fmt.Errorf("write task group %s: %w", g.ID, err)
	}
	return nil
}

// writeMembers upserts the member rows that differ from before (all of
// them for a new group) and removes them all once the group is deleted.
func writeMembers(ctx context.Context, tx pgx.Tx, before, after orch.State) error {
	g := after.Group
	if g.Deleted {
		_, err := tx.Exec(ctx, `DELETE FROM task_group_members WHERE group_id = $1`, g.ID)
		if err != nil {
			return fmt.Errorf("remove members of task group %s: %w", g.ID, err)
		}
		return nil
	}
	var changed []orch.Member
	for k, m := range after.Members {
		if old, ok := before.Members[k]; !ok || !reflect.DeepEqual(old, m) {
			changed = append(changed, m)
		}
	}
	return upsertMembers(ctx, tx, g.ID, changed)
}

func upsertMembers(ctx context.Context, tx pgx.Tx, groupID string, members []orch.Member) error {
	if len(members) == 0 {
		return nil
	}
	n := len(members)
	keys, tasks, statuses := make([]string, n), make([]string, n), make([]string, n)
	positions := make([]int32, n)
	versions := make([]int64, n)
	docs := make([][]byte, n)
	for i, m := range members {
		doc, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode member %s of task group %s: %w", m.Key, groupID, err)
		}
		keys[i], tasks[i], statuses[i], positions[i], versions[i], docs[i] = m.Key, m.TaskID, string(m.Status), int32(m.Index), m.Version, doc
	}
	_, err := tx.Exec(ctx, `INSERT INTO task_group_members (group_id, key, position, task_id, status, version, doc)
		SELECT $1, k, p, t, s, v, d FROM unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::bigint[], $7::json[]) AS x(k, p, t, s, v, d)
		ON CONFLICT (group_id, key) DO UPDATE SET position = EXCLUDED.position, task_id = EXCLUDED.task_id,
			status = EXCLUDED.status, version = EXCLUDED.version, doc = EXCLUDED.doc`, groupID, keys, positions, tasks, statuses, versions, docs)
	if err != nil {
		return fmt.Errorf("write members of task group %s: %w", groupID, err)
	}
	return nil
}

// List implements oapp.GroupStore: keyset pages on (created_at, id), the
// first of them after f.Offset groups.
func (s *GroupStore) List(ctx context.Context, f oapp.GroupFilter) ([]orch.Group, string, error) {
	if f.PageSize <= 0 {
		f.PageSize = 50
	}
	where := []string{"NOT deleted"}
	var args []any
	if f.Tenant != "*" {
		// An equality the prepared statement's generic plan can use as
		// the list index's first key (TaskViews.List says why).
		args = append(args, f.Tenant)
		where = append(where, "tenant_id = $1")
	}
	if f.Status != "" {
		args = append(args, f.Status)
		where = append(where, fmt.Sprintf("status = $%d", len(args)))
	}
	if f.Mode != "" {
		args = append(args, f.Mode)
		where = append(where, fmt.Sprintf("mode = $%d", len(args)))
	}
	if f.PageToken != "" {
		at, id, err := decodeToken(f.PageToken)
		if err != nil {
			return nil, "", oapp.ErrBadPageToken
		}
		args = append(args, at, id)
		where = append(where, fmt.Sprintf("(created_at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	args = append(args, f.PageSize+1, f.Offset)
	rows, err := s.DB.Query(ctx, `SELECT doc FROM task_groups WHERE `+strings.Join(where, " AND ")+
		fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d OFFSET $%d`, len(args)-1, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list task groups: %w", err)
	}
	out, err := collectDocs[orch.Group](rows, "task group")
	if err != nil {
		return nil, "", fmt.Errorf("list task groups: %w", err)
	}
	next := ""
	if len(out) > f.PageSize {
		out = out[:f.PageSize]
		last := out[len(out)-1]
		next = encodeToken(last.CreatedAt, last.ID)
	}
	return out, next, nil
}

// Due implements oapp.GroupStore. It runs on its keyed plan (pg.QueryKeyed):
// the open members (task_group_members_open_idx) each probe their task by
// id. Planned from statistics, it hashed the whole tasks table to join a
// few hundred open members, every few hundred milliseconds.
func (s *GroupStore) Due(ctx context.Context, now time.Time, limit int) ([]string, error) {
	var out []string
	err := pg.QueryKeyed(ctx, s.DB, func(rows pgx.Rows) error {
		var err error
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}, dueGroupsSQL, now, limit)
	return out, err
}

const dueGroupsSQL = `
		(SELECT id FROM task_groups WHERE wake_at <= $1 AND NOT deleted LIMIT $2)
		UNION
		(SELECT DISTINCT m.group_id FROM task_group_members m LEFT JOIN tasks t ON t.id = m.task_id
		 WHERE m.status NOT IN ('completed', 'failed', 'cancelled') AND m.task_id <> ''
		   AND (t.id IS NULL OR t.deleted OR t.status <> m.status)
		 LIMIT $2)`

// WriteGroupRows writes a group's row and member rows from its state
// (the rebuild of the inline projection).
func WriteGroupRows(ctx context.Context, tx pgx.Tx, s orch.State) error {
	if err := writeGroup(ctx, tx, s.Group); err != nil {
		return err
	}
	return writeMembers(ctx, tx, orch.State{}, s)
}
