// Package postgres keeps the audit log in Postgres: the projection handlers
// that write audit_logs from the task, orchestration, pipeline, quota and
// admin topics (convert with
// package events, store guarded by the event id), the listing query, and
// the retention's archive-then-delete transaction.
package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/adapters/events"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
)

// Topic says which envelope a projection decodes.
type Topic int

const (
	// TaskTopic records are taskv1.TaskEvent envelopes.
	TaskTopic Topic = iota
	// QuotaTopic records are quotav1.QuotaEvent envelopes.
	QuotaTopic
	// OrchestrationTopic records are taskv1.OrchestrationEvent envelopes
	// (task groups and templates).
	OrchestrationTopic
	// PipelineTopic records are pipelinev1.JobEvent envelopes (the
	// conversion pipeline's jobs).
	PipelineTopic
	// AdminTopic records are adminv1.AdminEvent envelopes (the gateway's
	// tenants, keys and agents).
	AdminTopic
)

// Resources are the resources t's entries have, and only its.
func (t Topic) Resources() []string {
	switch t {
	case QuotaTopic:
		return events.QuotaResources()
	case OrchestrationTopic:
		return events.OrchestrationResources()
	case PipelineTopic:
		return events.PipelineResources()
	case AdminTopic:
		return events.AdminResources()
	}
	return events.TaskResources()
}

// Rows is an SQL condition on audit_logs that holds for t's entries and
// no other topic's: what a replay of t compares.
func (t Topic) Rows() string {
	quoted := make([]string, 0, len(t.Resources()))
	for _, r := range t.Resources() {
		quoted = append(quoted, "'"+strings.ReplaceAll(r, "'", "''")+"'")
	}
	return "resource IN (" + strings.Join(quoted, ", ") + ")"
}

// Projection is the projection.Handler that writes a topic's events to
// Table (audit_logs, or a replay's copy).
type Projection struct {
	Table string
	Topic Topic
}

// Apply implements projection.Handler: decode, convert, store. A record
// that does not decode or holds an event without a row fails the batch
// (the runner parks it as a dead letter).
func (p Projection) Apply(ctx context.Context, tx pgx.Tx, records []*kgo.Record) error {
	entries := make([]domain.Entry, 0, len(records))
	for _, rec := range records {
		e, ok, err := p.convert(rec)
		if err != nil {
			return fmt.Errorf("audit: record %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		if ok {
			entries = append(entries, e)
		}
	}
	return Insert(ctx, tx, p.Table, entries)
}

func (p Projection) convert(rec *kgo.Record) (domain.Entry, bool, error) {
	switch p.Topic {
	case QuotaTopic:
		var ev quotav1.QuotaEvent
		if err := proto.Unmarshal(rec.Value, &ev); err != nil {
			return domain.Entry{}, false, fmt.Errorf("decode: %w", err)
		}
		return events.QuotaEntry(&ev)
	case OrchestrationTopic:
		var ev taskv1.OrchestrationEvent
		if err := proto.Unmarshal(rec.Value, &ev); err != nil {
			return domain.Entry{}, false, fmt.Errorf("decode: %w", err)
		}
		return events.OrchestrationEntry(&ev)
	case PipelineTopic:
		var ev pipelinev1.JobEvent
		if err := proto.Unmarshal(rec.Value, &ev); err != nil {
			return domain.Entry{}, false, fmt.Errorf("decode: %w", err)
		}
		return events.PipelineEntry(&ev)
	case AdminTopic:
		var ev adminv1.AdminEvent
		if err := proto.Unmarshal(rec.Value, &ev); err != nil {
			return domain.Entry{}, false, fmt.Errorf("decode: %w", err)
		}
		return events.AdminEntry(&ev)
	}
	var ev taskv1.TaskEvent
	if err := proto.Unmarshal(rec.Value, &ev); err != nil {
		return domain.Entry{}, false, fmt.Errorf("decode: %w", err)
	}
	return events.TaskEntry(&ev)
}

// Insert writes entries to table in one statement. The event id is the
// key, so an entry stored before (a replay, a redelivery) stays as it is,
// except that one stored before entries carried their event's version
// (version 0, migration 0004) takes it now; an entry older than the
// archive mark is not written again after the retention archived and
// deleted its like. The mark is read FOR SHARE, so an Expire that moves it
// waits for this transaction and the other way round.
func Insert(ctx context.Context, tx pgx.Tx, table string, entries []domain.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	// -infinity (no retention ran yet) scans as a zero Time.
	var ts pgtype.Timestamptz
	if err := tx.QueryRow(ctx, `SELECT archived_before FROM audit_retention FOR SHARE`).Scan(&ts); err != nil {
		return fmt.Errorf("audit: read the archive mark: %w", err)
	}
	mark := ts.Time
	n := len(entries)
	ids, tenants, actions, resources, rids := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	users, machines, details, ips := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	times, versions := make([]time.Time, 0, n), make([]int64, 0, n)
	// One row per event id: a record delivered twice in one batch would
	// otherwise have the upsert touch its row twice, which Postgres refuses.
	seen := make(map[string]bool, n)
	for _, e := range entries {
		if (!mark.IsZero() && e.At.Before(mark)) || seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		ids, tenants, actions, resources, rids = append(ids, e.ID), append(tenants, e.TenantID), append(actions, e.Action),
			append(resources, e.Resource), append(rids, e.ResourceID)
		users, machines, details, ips = append(users, e.UserID), append(machines, e.MachineID), append(details, e.Details), append(ips, e.IP)
		times, versions = append(times, e.At), append(versions, e.Version)
	}
	if len(ids) == 0 {
		return nil
	}
	t := pgx.Identifier{table}.Sanitize()
	_, err := tx.Exec(ctx, `INSERT INTO `+t+`
		(id, timestamp, tenant_id, action, resource, resource_id, user_id, machine_id, details, ip, version)
		SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::json[], $10::text[], $11::bigint[])
		ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version WHERE `+t+`.version = 0 AND EXCLUDED.version <> 0`,
		ids, times, tenants, actions, resources, rids, users, machines, details, ips, versions)
	if err != nil {
		return fmt.Errorf("audit: write: %w", err)
	}
	return nil
}

// Store lists entries.
type Store struct{ DB *pgxpool.Pool }

const columns = `id, timestamp, version, tenant_id, action, resource, resource_id, user_id, machine_id, details::text, ip`

// List implements app.Store.
func (s Store) List(ctx context.Context, q domain.Query) ([]domain.Entry, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Tenant != "" {
		where = append(where, "tenant_id = "+arg(q.Tenant))
	}
	if q.Resource != "" {
		where = append(where, "resource = "+arg(q.Resource))
	}
	if q.Action != "" {
		where = append(where, "action = "+arg(q.Action))
	}
	if q.ActionVerb != "" {
		where = append(where, "split_part(action, '.', 2) = "+arg(q.ActionVerb))
	}
	if q.ResourceID != "" {
		where = append(where, "resource_id = "+arg(q.ResourceID))
	}
	if q.UserID != "" {
		where = append(where, "user_id = "+arg(q.UserID))
	}
	if !q.From.IsZero() {
		where = append(where, "timestamp >= "+arg(q.From))
	}
	if !q.Until.IsZero() {
		where = append(where, "timestamp < "+arg(q.Until))
	}
	if q.After != nil {
		where = append(where, "(timestamp, version, id) < ("+arg(q.After.At)+"::timestamptz, "+arg(q.After.Version)+"::bigint, "+
			arg(q.After.ID)+")")
	}
	sql := `SELECT ` + columns + ` FROM audit_logs`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	// The listing order (domain.Cursor), as the indexes of migration 0004.
	sql += ` ORDER BY timestamp DESC, version DESC, id DESC LIMIT ` + arg(q.PageSize+1)
	rows, err := s.DB.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	return scan(rows)
}

func scan(rows pgx.Rows) ([]domain.Entry, error) {
	var out []domain.Entry
	for rows.Next() {
		var e domain.Entry
		if err := rows.Scan(&e.ID, &e.At, &e.Version, &e.TenantID, &e.Action, &e.Resource, &e.ResourceID, &e.UserID, &e.MachineID,
			&e.Details, &e.IP); err != nil {
			rows.Close()
			return nil, fmt.Errorf("audit: read: %w", err)
		}
		e.At = e.At.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: read: %w", err)
	}
	return out, nil
}

// Expirer removes expired entries.
type Expirer struct{ DB *pgxpool.Pool }

// Expire implements app.Expirer. The archive mark only moves forward.
func (x Expirer) Expire(ctx context.Context, cutoff time.Time, n int, archive func(context.Context, []domain.Entry) error) (int, error) {
	tx, err := x.DB.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("audit: expire: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `UPDATE audit_retention SET archived_before = greatest(archived_before, $1)`, cutoff); err != nil {
		return 0, fmt.Errorf("audit: move the archive mark: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT `+columns+` FROM audit_logs WHERE timestamp < $1 ORDER BY timestamp, version, id LIMIT $2`, cutoff, n)
	if err != nil {
		return 0, fmt.Errorf("audit: expired entries: %w", err)
	}
	entries, err := scan(rows)
	if err != nil {
		return 0, err
	}
	if len(entries) == 0 {
		if err := tx.Commit(ctx); err != nil {
			return 0, fmt.Errorf("audit: expire: %w", err)
		}
		return 0, nil
	}
	if err := archive(ctx, entries); err != nil {
		return 0, err
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	if _, err := tx.Exec(ctx, `DELETE FROM audit_logs WHERE id = ANY($1)`, ids); err != nil {
		return 0, fmt.Errorf("audit: delete expired entries: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("audit: expire: %w", err)
	}
	return len(entries), nil
}
