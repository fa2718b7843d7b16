package postgres

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// TaskViews is app.TaskViews over the task_views table, which the
// projection of the task topic fills (package adapters/views).
type TaskViews struct{ DB *pgxpool.Pool }

// List implements app.TaskViews. Pages are keyset-paginated on
// (created_at, id), so tasks created meanwhile do not shift them.
func (tv TaskViews) List(ctx context.Context, f app.ListFilter) ([]domain.Task, string, error) {
	if f.PageSize <= 0 {
		f.PageSize = 50
	}
	query, args, err := listQuery(f)
	if err != nil {
		return nil, "", err
	}
	rows, err := tv.DB.Query(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	tasks, err := scanTasks(rows)
	if err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	next := ""
	if len(tasks) > f.PageSize {
		tasks = tasks[:f.PageSize]
		last := tasks[len(tasks)-1]
		next = encodeToken(last.CreatedAt, last.ID)
	}
	return tasks, next, nil
}

// freshnessWindow is how many of the event store's latest events Unapplied
// compares with task_views: a client's own changes just made are among
// them; older ones the projection has applied unless it is far behind,
// and then a list is eventually consistent anyway.
const freshnessWindow = 500

// Unapplied implements app.TaskViews. The window is read backwards along
// events_position_idx; the tenant and the aggregate type filter it
// afterwards, so the statement costs the same whoever asks.
func (tv TaskViews) Unapplied(ctx context.Context, tenant string) ([]app.TaskVersion, error) {
	rows, err := tv.DB.Query(ctx, `
		SELECT e.aggregate_id, e.version
		FROM (SELECT aggregate_id, version, tenant_id, aggregate_type FROM events
			ORDER BY tx_id DESC, id DESC LIMIT $3) e
		WHERE e.aggregate_type = $2 AND ($1 = '*' OR e.tenant_id = $1)
			AND NOT EXISTS (SELECT 1 FROM task_views v WHERE v.id = e.aggregate_id AND v.version >= e.version)`,
		tenant, AggregateType, freshnessWindow)
	if err != nil {
		return nil, fmt.Errorf("list tasks: changes not in task_views: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.TaskVersion, error) {
		var c app.TaskVersion
		err := r.Scan(&c.ID, &c.Version)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks: changes not in task_views: %w", err)
	}
	return out, nil
}

// Applied implements app.TaskViews.
func (tv TaskViews) Applied(ctx context.Context, changes []app.TaskVersion) (bool, error) {
	ids, versions := make([]string, len(changes)), make([]int64, len(changes))
	for i, c := range changes {
		ids[i], versions[i] = c.ID, c.Version
	}
	var done bool
	err := tv.DB.QueryRow(ctx, `
		SELECT NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::bigint[]) AS c(id, version)
			WHERE NOT EXISTS (SELECT 1 FROM task_views v WHERE v.id = c.id AND v.version >= c.version))`,
		ids, versions).Scan(&done)
	if err != nil {
		return false, fmt.Errorf("list tasks: waiting for task_views: %w", err)
	}
	return done, nil
}

// listQuery is List's statement for f (f.PageSize set): one page and one
// row more, to tell whether another page follows.
func listQuery(f app.ListFilter) (string, []any, error) {
	var (
		where = []string{"NOT deleted"}
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(args))))
	}
	if f.Tenant != "*" {
		// A plain equality, not "($1 = '*' OR tenant_id = $1)": the
		// statement is prepared, and Postgres's generic plan for the OR
		// cannot use tenant_id as an index key, so it read every tenant's
		// tasks for one tenant's page (TestListPlansUseTheTenantsIndexes).
		add("tenant_id = ?", f.Tenant)
	}
	if f.Status != "" {
		add("status = ?", f.Status)
		// The literal list lets a generic plan (the statement is prepared)
		// use the partial index of active tasks (migration 0051).
		if !domain.Status(f.Status).Final() {
			where = append(where, activeStatuses)
		}
	}
	if f.Machine != "" {
		add("(machine_id = ? OR assigned_machine_id = ?)", f.Machine)
	}
	if f.Group != "" {
		add("group_id = ?", f.Group)
	}
	if f.Priority != 0 {
		add("priority = ?", f.Priority)
	}
	if f.Type != "" {
		add("type = ?", f.Type)
	}
	if !f.CreatedAfter.IsZero() {
		add("created_at >= ?", f.CreatedAfter)
	}
	if !f.CreatedBefore.IsZero() {
		add("created_at < ?", f.CreatedBefore)
	}
	if f.PageToken != "" {
		at, id, err := decodeToken(f.PageToken)
		if err != nil {
			return "", nil, err
		}
		args = append(args, at, id)
		where = append(where, fmt.Sprintf("(created_at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	args = append(args, f.PageSize+1)
	query := `SELECT doc FROM task_views WHERE ` + strings.Join(where, " AND ") +
		fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args))
	if f.Offset > 0 {
		args = append(args, f.Offset)
		query += fmt.Sprintf(` OFFSET $%d`, len(args))
	}
	return query, args, nil
}

// activeStatuses is task_views_active_idx's status predicate.
const activeStatuses = `status IN ('pending', 'assigned', 'running', 'preempted', 'suspended')`

func encodeToken(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id))
}

func decodeToken(tok string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return time.Time{}, "", app.ErrBadPageToken
	}
	at, id, ok := strings.Cut(string(b), "|")
	if !ok || id == "" {
		return time.Time{}, "", app.ErrBadPageToken
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}, "", app.ErrBadPageToken
	}
	return t, id, nil
}
