// Package postgres keeps the pipeline's state in its own Postgres schema
// and implements the pipeline app's JobStore and UploadStore: job events
// in the schema's event store (the outbox its relay publishes to the job
// topic) and, in the same transaction, the jobs row they fold into; and
// the uploads table.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// AggregateType of job events in the event store.
const AggregateType = "job"

var events = eventstore.New()

// Store implements app.JobStore and app.UploadStore. Its pool's
// search_path starts with the pipeline's schema.
type Store struct {
	DB *pgxpool.Pool
	// AfterCommit, if set, is called after every commit that recorded
	// events (the relay's Notify).
	AfterCommit func()
}

func (s *Store) committed() {
	if s.AfterCommit != nil {
		s.AfterCommit()
	}
}

// appendRecords appends records that move before to the job after them,
// and returns that job.
func appendRecords(ctx context.Context, tx pgx.Tx, before domain.Job, records []domain.Record) (domain.Job, error) {
	trace := otel.Inject(ctx)
	j := before
	evs := make([]eventstore.Event, 0, len(records))
	for _, r := range records {
		j = domain.Apply(j, r)
		id := uuid.NewString()
		payload, err := codec.Marshal(id, j.ID, j.TenantID, j.Version, r, trace)
		if err != nil {
			return j, err
		}
		evs = append(evs, eventstore.Event{AggregateType: AggregateType, AggregateID: j.ID, Version: j.Version,
			Type: r.Event.EventName(), EventID: id, TenantID: j.TenantID, OccurredAt: r.At, Payload: payload, Headers: trace})
	}
	return j, events.Append(ctx, tx, evs...)
}

// Create implements app.JobStore.
func (s *Store) Create(ctx context.Context, records []domain.Record) (domain.Job, error) {
	var j domain.Job
	err := pg.InTx(ctx, s.DB, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		if j, err = appendRecords(ctx, tx, domain.Job{}, records); err != nil {
			return err
		}
		return upsert(ctx, tx, j)
	})
	if err != nil {
		return domain.Job{}, fmt.Errorf("create job: %w", err)
	}
	s.committed()
	return j, nil
}

// Upsert writes a job's row (Create, Mutate and the rebuild from events).
func upsert(ctx context.Context, tx pgx.Tx, j domain.Job) error {
	doc, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO jobs (job_id, tenant_id, status, version, doc, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (job_id) DO UPDATE SET status = $3, version = $4, doc = $5, updated_at = $7`,
		j.ID, j.TenantID, string(j.Status), j.Version, doc, j.CreatedAt, j.UpdatedAt)
	return err
}

// Upsert writes j's row in tx (the rebuild of the jobs table).
func Upsert(ctx context.Context, tx pgx.Tx, j domain.Job) error { return upsert(ctx, tx, j) }

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// jobs runs a query of doc columns.
func jobs(ctx context.Context, q querier, sql string, args ...any) ([]domain.Job, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pg.CollectDocs(rows, "job doc", func(doc []byte, j *domain.Job) error { return json.Unmarshal(doc, j) })
}

// Row reads job id's row as stored, in q (the rebuild's comparison).
func Row(ctx context.Context, q querier, id string) (domain.Job, error) {
	js, err := jobs(ctx, q, `SELECT doc FROM jobs WHERE job_id = $1`, id)
	if err != nil {
		return domain.Job{}, err
	}
	if len(js) == 0 {
		return domain.Job{}, domain.ErrNotFound
	}
	return js[0], nil
}

// Get implements app.JobStore.
func (s *Store) Get(ctx context.Context, tenant, id string) (domain.Job, error) {
	js, err := jobs(ctx, s.DB, `SELECT doc FROM jobs WHERE job_id = $1 AND ($2 = '*' OR tenant_id = $2)`, id, tenant)
	if err != nil {
		return domain.Job{}, fmt.Errorf("get job %s: %w", id, err)
	}
	if len(js) == 0 {
		return domain.Job{}, domain.ErrNotFound
	}
	return js[0], nil
}

// Mutate implements app.JobStore. The row lock serializes commands on one
// job; the event store's (aggregate_id, version) key would refuse a
// writer that skipped it. A transaction aborted only because of
// concurrent ones is run again (pg.InTxRetried).
func (s *Store) Mutate(ctx context.Context, id string, decide func(j domain.Job) ([]domain.Record, error)) (domain.Job, error) {
	var after domain.Job
	var recorded bool
	err := pg.InTxRetried(ctx, s.DB, pgx.TxOptions{}, func(tx pgx.Tx) error {
		recorded = false // a run again starts over
		js, err := jobs(ctx, tx, `SELECT doc FROM jobs WHERE job_id = $1 FOR UPDATE`, id)
		if err != nil {
			return err
		}
		if len(js) == 0 {
			return domain.ErrNotFound
		}
		records, err := decide(js[0])
		if err != nil || len(records) == 0 {
			after = js[0]
			return err
		}
		if after, err = appendRecords(ctx, tx, js[0], records); err != nil {
			return err
		}
		recorded = true
		return upsert(ctx, tx, after)
	})
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			return domain.Job{}, err
		}
		var invalid *domain.InvalidError
		if errors.As(err, &invalid) {
			return domain.Job{}, err
		}
		return domain.Job{}, fmt.Errorf("change job %s: %w", id, err)
	}
	if recorded {
		s.committed()
	}
	return after, nil
}

// Active implements app.JobStore.
func (s *Store) Active(ctx context.Context, after string, limit int) ([]domain.Job, error) {
	js, err := jobs(ctx, s.DB, `SELECT doc FROM jobs WHERE status NOT IN ('COMPLETED', 'FAILED') AND job_id > $1
		ORDER BY job_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("active jobs: %w", err)
	}
	return js, nil
}

// SaveUpload implements app.UploadStore.
func (s *Store) SaveUpload(ctx context.Context, u app.Upload) error {
	_, err := s.DB.Exec(ctx, `INSERT INTO uploads (key, tenant_id, kind, name, size, sha256, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, u.Key, u.TenantID, string(u.Kind), u.Name, u.Size, u.SHA256, u.CreatedAt)
	if err != nil {
		return fmt.Errorf("save upload: %w", err)
	}
	return nil
}

// Upload implements app.UploadStore.
func (s *Store) Upload(ctx context.Context, tenant, key string) (app.Upload, error) {
	var u app.Upload
	var kind string
	var used, expired *time.Time
	err := s.DB.QueryRow(ctx, `SELECT key, tenant_id, kind, name, size, sha256, created_at, used_at, expired_at FROM uploads
		WHERE key = $1 AND tenant_id = $2`, key, tenant).Scan(&u.Key, &u.TenantID, &kind, &u.Name, &u.Size, &u.SHA256,
		&u.CreatedAt, &used, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return app.Upload{}, domain.ErrNotFound
	}
	if err != nil {
		return app.Upload{}, fmt.Errorf("get upload: %w", err)
	}
	u.Kind = domain.Kind(kind)
	if used != nil {
		u.UsedAt = used.UTC()
	}
	if expired != nil {
		u.ExpiredAt = expired.UTC()
	}
	return u, nil
}

// UseUploads implements app.UploadStore. The update and the sweeper's
// expiry write the same rows: whichever commits first wins and the other
// re-reads the row (READ COMMITTED rechecks its conditions), so an upload
// is either used or expired, never both.
//
// An upload a job used stays used (the sweeper expires unused ones only),
// so a read confirms it without the update: jobs created from one upload
// at once then neither wait for each other's lock on its row nor each
// commit a write to it. Only the keys the read does not confirm are
// updated.
func (s *Store) UseUploads(ctx context.Context, tenant string, keys []string, at time.Time) error {
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	used, err := s.DB.Query(ctx, `SELECT key FROM uploads
		WHERE key = ANY($1) AND tenant_id = $2 AND used_at IS NOT NULL AND expired_at IS NULL`, keys, tenant)
	if err != nil {
		return fmt.Errorf("use uploads: %w", err)
	}
	got, err := pgx.CollectRows(used, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("use uploads: %w", err)
	}
	for _, k := range got {
		delete(want, k)
	}
	if len(want) > 0 {
		rows, err := s.DB.Query(ctx, `UPDATE uploads SET used_at = COALESCE(used_at, $3)
			WHERE key = ANY($1) AND tenant_id = $2 AND expired_at IS NULL RETURNING key`, slices.Collect(maps.Keys(want)), tenant, at)
		if err != nil {
			return fmt.Errorf("use uploads: %w", err)
		}
		if got, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("use uploads: %w", err)
		}
		for _, k := range got {
			delete(want, k)
		}
	}
	for _, k := range keys {
		if want[k] {
			return &app.UploadExpiredError{Key: k}
		}
	}
	return nil
}

// ExpireUploads implements app.UploadStore: one statement marks the
// unused uploads created before cutoff as expired, a second returns every
// expired upload whose object is not deleted yet (those of a sweeper that
// died in between too).
func (s *Store) ExpireUploads(ctx context.Context, cutoff, at time.Time, limit int) ([]app.Upload, error) {
	_, err := s.DB.Exec(ctx, `UPDATE uploads SET expired_at = $2 WHERE key IN (
		SELECT key FROM uploads WHERE used_at IS NULL AND expired_at IS NULL AND created_at < $1
		ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED) AND used_at IS NULL AND expired_at IS NULL`, cutoff, at, limit)
	if err != nil {
		return nil, fmt.Errorf("expire uploads: %w", err)
	}
	rows, err := s.DB.Query(ctx, `SELECT key, tenant_id, kind, name, size, created_at, expired_at FROM uploads
		WHERE expired_at IS NOT NULL AND purged_at IS NULL ORDER BY expired_at, key LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("expired uploads: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.Upload, error) {
		var u app.Upload
		var kind string
		err := r.Scan(&u.Key, &u.TenantID, &kind, &u.Name, &u.Size, &u.CreatedAt, &u.ExpiredAt)
		u.Kind = domain.Kind(kind)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("expired uploads: %w", err)
	}
	return out, nil
}

// UploadsPurged implements app.UploadStore.
func (s *Store) UploadsPurged(ctx context.Context, keys []string, at time.Time) error {
	if _, err := s.DB.Exec(ctx, `UPDATE uploads SET purged_at = $2 WHERE key = ANY($1) AND expired_at IS NOT NULL`, keys, at); err != nil {
		return fmt.Errorf("uploads purged: %w", err)
	}
	return nil
}

// Rebuild folds every job event of the schema's event store, in order,
// into jobs, calling each with the rebuilt jobs in the order their first
// events were recorded.
func Rebuild(ctx context.Context, tx pgx.Tx, each func(jobs []domain.Job) error) (int, error) {
	rebuilt := map[string]domain.Job{}
	var order []string
	n := 0
	err := events.Rebuild(ctx, tx, AggregateType, 2000, func(ctx context.Context, page []eventstore.Event) error {
		for _, e := range page {
			_, r, err := codec.Unmarshal(e.Payload)
			if err != nil {
				return fmt.Errorf("event %d: %w", e.ID, err)
			}
			j, seen := rebuilt[e.AggregateID]
			if !seen {
				order = append(order, e.AggregateID)
			}
			rebuilt[e.AggregateID] = domain.Apply(j, r)
			n++
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	out := make([]domain.Job, len(order))
	for i, id := range order {
		out[i] = rebuilt[id]
	}
	return n, each(out)
}
