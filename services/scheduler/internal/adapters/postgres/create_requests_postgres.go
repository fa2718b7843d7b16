package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Creations with a request id (the pipeline's stages, clients retrying a
// create) run in set-based batches of their own (pg.KeyedBatcher keyed by
// tenant and request id), not in the group-committed transactions of
// claims. A batch costs two round trips whatever its size: BEGIN with one
// read of every request id it carries (createRequest, with the tasks of a
// create that used it before), then every new request's row, tasks and
// events with COMMIT. In a group-committed transaction each creation cost
// two round trips of its own, one after another, and waited behind the
// agents' claims: on a busy machine that was tens of milliseconds between
// a stage's end and its next task
// (docs/decisions/0097-creates-with-a-request-id-in-set-based-batches.md).
//
// No lock guards a request id that is not recorded yet: two replicas may
// decide the same new request at once. The second to insert its row gets
// a unique violation, which is a conflict (requestTaken): the batcher
// decides that batch again, and the request now reads as used.

// createRequest is what a request id stands for: the tasks of the create
// that used it first, as they are now.
type createRequest struct {
	Tasks []domain.Task
	// TaskIDs is the row's task_ids as read, missing tasks included: a
	// request that moves to new tasks replaces the row only if it still
	// names these.
	TaskIDs []string
	// At is when a new request is recorded.
	At time.Time
}

// requestKey is the batcher's key of a tenant's request id.
func requestKey(tenant, requestID string) string { return tenant + "\x00" + requestID }

// requestRows is the pg.KeyedStore of creations with a request id. A
// change's events are the new tasks' changes, one per task.
type requestRows struct{}

// Lock reads the recorded requests among keys with their tasks (missing
// tasks skipped, in creation order). Nothing is locked: a row is only
// ever replaced by a delete that names the task ids it read, so of two
// transactions moving one name the second finds nothing to delete and
// its insert is a conflict.
func (requestRows) Lock(keys []string) (string, []any, func(pgx.Rows) (map[string]createRequest, error)) {
	tenants, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], ids[i], _ = strings.Cut(k, "\x00")
	}
	return `SELECT r.tenant_id, r.request_id, r.task_ids, ARRAY(SELECT t.doc FROM unnest(r.task_ids) WITH ORDINALITY AS x(id, ord)
			JOIN tasks t ON t.id = x.id ORDER BY x.ord)
		FROM unnest($1::text[], $2::text[]) AS k(tenant_id, request_id)
		JOIN create_requests r ON r.tenant_id = k.tenant_id AND r.request_id = k.request_id`, []any{tenants, ids},
		func(rows pgx.Rows) (map[string]createRequest, error) {
			defer rows.Close()
			out := map[string]createRequest{}
			for rows.Next() {
				var tenant, id string
				var taskIDs []string
				var docs [][]byte
				if err := rows.Scan(&tenant, &id, &taskIDs, &docs); err != nil {
					return nil, fmt.Errorf("create requests: %w", err)
				}
				r := createRequest{Tasks: make([]domain.Task, len(docs)), TaskIDs: taskIDs}
				for i, doc := range docs {
					if err := codec.DecodeTask(doc, &r.Tasks[i]); err != nil {
						return nil, fmt.Errorf("create requests: decode task doc: %w", err)
					}
				}
				out[requestKey(tenant, id)] = r
			}
			return out, rows.Err()
		}
}

// Queue writes each new request's row (replacing the row of a name that
// moves to new tasks), then every task and event of the batch as save
// does.
func (requestRows) Queue(b *pgx.Batch, changes []pg.KeyedChange[createRequest, change]) (func(error) error, error) {
	var list []change
	for _, c := range changes {
		tenant, id, _ := strings.Cut(c.Key, "\x00")
		ids := make([]string, len(c.After.Tasks))
		for i, t := range c.After.Tasks {
			ids[i] = t.ID
		}
		if c.Found {
			// Only the row as read: when another create moved the name
			// meanwhile, this deletes nothing and the insert below is a
			// unique violation, which decides the batch again.
			b.Queue(`DELETE FROM create_requests WHERE tenant_id = $1 AND request_id = $2 AND task_ids = $3`,
				tenant, id, c.Before.TaskIDs)
		}
		b.Queue(`INSERT INTO create_requests (tenant_id, request_id, task_ids, created_at) VALUES ($1, $2, $3, $4)`,
			tenant, id, ids, c.After.At)
		list = append(list, c.Events...)
	}
	mapErr, err := queueChanges(b, list)
	if err != nil {
		return nil, err
	}
	return func(err error) error {
		if pg.IsUniqueViolation(err, "create_requests_pkey") {
			return requestTaken{err}
		}
		return mapErr(err)
	}, nil
}

// requestTaken: another transaction recorded a request id of the batch
// after the batch read it unused. Deciding again reads it used.
type requestTaken struct{ err error }

func (e requestTaken) Error() string {
	return "create request: recorded by a concurrent create: " + e.err.Error()
}
func (e requestTaken) Unwrap() error { return e.err }

// Is makes a taken request a conflict (errors.Is(err,
// eventstore.ErrConflict)), which the batcher retries.
func (requestTaken) Is(target error) bool { return target == eventstore.ErrConflict }

// createWithRequest creates the tasks of n, or returns those of the
// tenant's earlier create with n.RequestID (for a rerunnable name, only
// while one of them has not ended).
func (s *TaskStore) createWithRequest(ctx context.Context, n app.NewTasks, changes []change) ([]domain.Task, error) {
	trace := otel.Inject(ctx)
	created := make([]domain.Task, len(changes))
	createdIDs := make([]string, len(changes))
	for i := range changes {
		c := &changes[i]
		c.Traces = make([]map[string]string, len(c.Records))
		for j := range c.Traces {
			c.Traces[j] = trace
		}
		created[i] = domain.Fold(c.Records)
		createdIDs[i] = created[i].ID
	}
	out, err := s.requests.Do(ctx, requestKey(n.Tenant, n.RequestID),
		func(prior createRequest, found bool) (createRequest, []change, error) {
			if found && !(n.Rerunnable && domain.Ended(prior.Tasks)) {
				return prior, nil, nil
			}
			return createRequest{Tasks: created, TaskIDs: createdIDs, At: n.At}, changes, nil
		})
	if err != nil {
		return nil, stopping(err)
	}
	return out.Tasks, nil
}
