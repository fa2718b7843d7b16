// Package postgres keeps webhook notifications in Postgres: the webhook
// consumer's Apply (task events → webhook_tasks and webhook_deliveries,
// plus each new delivery's schedule row), the endpoints with their sealed
// keys, the deliveries' listing, and the dispatcher's claims and attempts.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/adapters/events"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

// Tables names the tables the consumer writes: the live ones or a
// replay's. Tasks and Deliveries are derived from the events alone;
// Schedule is the dispatcher's and replays write a scratch copy of it.
type Tables struct{ Tasks, Groups, Deliveries, Schedule string }

// LiveTables are the live tables.
var LiveTables = Tables{Tasks: "webhook_tasks", Groups: "webhook_groups", Deliveries: "webhook_deliveries", Schedule: "webhook_schedule"}

// Notifier is the webhook consumer's Apply.
type Notifier struct {
	Tables Tables
	// MaxAge is how long a new delivery is retried.
	MaxAge time.Duration
	// Scheduled, if set, is called inside the transaction when it
	// scheduled a delivery to send: the dispatcher is worth waking after
	// the commit. A delivery skipped at once (no endpoint anywhere) does
	// not call it, so a tenant without webhooks costs the dispatcher
	// nothing.
	Scheduled func()
}

// Apply folds a run of task-topic records (consumer.Apply): the tasks'
// endpoints are read in one statement, the events folded in order, the
// tasks and the new deliveries written in one statement each. The task's
// version guards the fold and the delivery id is the event's, so a record
// seen again changes nothing. A new delivery is scheduled in the same
// statement — due now, or skipped when it has no URL and its tenant no
// default endpoint (the schedule is the dispatcher's, not derived from
// events, so reading the endpoint here keeps replays exact).
func (n Notifier) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	evs := make([]domain.Event, 0, len(recs))
	ids := make([]string, 0, len(recs))
	for _, rec := range recs {
		var env taskv1.TaskEvent
		if err := proto.Unmarshal(rec.Value, &env); err != nil {
			return fmt.Errorf("webhooks: decode %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		ev, err := events.Convert(&env)
		if err != nil {
			return err
		}
		evs, ids = append(evs, ev), append(ids, ev.TaskID)
	}
	tasks := pgx.Identifier{n.Tables.Tasks}.Sanitize()
	state, err := n.load(ctx, tx, tasks, ids)
	if err != nil {
		return err
	}
	changed := map[string]bool{}
	var made []domain.Delivery
	for _, ev := range evs {
		if err := domain.Refuse(state[ev.TaskID], ev); err != nil {
			return err
		}
		next, d, applied := domain.Fold(state[ev.TaskID], ev)
		if !applied {
			continue
		}
		state[ev.TaskID], changed[ev.TaskID] = next, true
		if d != nil {
			made = append(made, *d)
		}
	}
	if err := storeTasks(ctx, tx, tasks, state, changed); err != nil {
		return err
	}
	return n.storeDeliveries(ctx, tx, made)
}

func (n Notifier) load(ctx context.Context, tx pgx.Tx, table string, ids []string) (map[string]domain.Task, error) {
	rows, err := tx.Query(ctx, `SELECT task_id, tenant_id, url, version FROM `+table+` WHERE task_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("webhooks: load tasks: %w", err)
	}
	out := map[string]domain.Task{}
	var t domain.Task
	if _, err := pgx.ForEachRow(rows, []any{&t.TaskID, &t.TenantID, &t.URL, &t.Version}, func() error {
		out[t.TaskID] = t
		return nil
	}); err != nil {
		return nil, fmt.Errorf("webhooks: load tasks: %w", err)
	}
	return out, nil
}

func storeTasks(ctx context.Context, tx pgx.Tx, table string, state map[string]domain.Task, changed map[string]bool) error {
	if len(changed) == 0 {
		return nil
	}
	ids, tenants, urls, versions := make([]string, 0, len(changed)), make([]string, 0, len(changed)), make([]string, 0, len(changed)),
		make([]int64, 0, len(changed))
	for id := range changed {
		t := state[id]
		ids, tenants, urls, versions = append(ids, t.TaskID), append(tenants, t.TenantID), append(urls, t.URL), append(versions, t.Version)
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+table+` (task_id, tenant_id, url, version)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
		ON CONFLICT (task_id) DO UPDATE SET url = EXCLUDED.url, version = EXCLUDED.version WHERE `+table+`.version < EXCLUDED.version`,
		ids, tenants, urls, versions)
	if err != nil {
		return fmt.Errorf("webhooks: store tasks: %w", err)
	}
	return nil
}

// Alerts is the group consumer's Apply on the orchestration topic: a
// group's creation keeps its own endpoint (webhook_groups), its end makes
// one delivery ({"task_group_id":"…","status":"…"}) to that endpoint or
// the tenant's default, a repeat's breaker opening an alert to the
// tenant's default. Deliveries are keyed by the event id and the endpoint
// is written from the creation alone, so a record seen again changes
// nothing. It shares the deliveries and their schedule with Notifier.
type Alerts struct {
	Tables    Tables
	MaxAge    time.Duration
	Scheduled func() // as Notifier's
}

// Apply implements consumer.Apply. The batch is folded in order: a group
// created and ended in one batch is notified at the endpoint it was
// created with.
func (a Alerts) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	evs := make([]domain.GroupEvent, 0, len(recs))
	var ended []string
	for _, rec := range recs {
		var env taskv1.OrchestrationEvent
		if err := proto.Unmarshal(rec.Value, &env); err != nil {
			return fmt.Errorf("webhooks: decode %d/%d: %w", rec.Partition, rec.Offset, err)
		}
		e, err := events.ConvertOrchestration(&env)
		if err != nil {
			return err
		}
		if e.Kind == domain.Final {
			ended = append(ended, e.GroupID)
		}
		evs = append(evs, e)
	}
	groups := pgx.Identifier{a.Tables.Groups}.Sanitize()
	urls, err := loadGroups(ctx, tx, groups, ended)
	if err != nil {
		return err
	}
	var made []domain.Delivery
	for _, e := range evs {
		switch e.Kind {
		case domain.Spec:
			urls[e.GroupID] = e.URL
			if _, err := tx.Exec(ctx, `INSERT INTO `+groups+` (group_id, tenant_id, url) VALUES ($1, $2, $3)
				ON CONFLICT (group_id) DO NOTHING`, e.GroupID, e.TenantID, e.URL); err != nil {
				return fmt.Errorf("webhooks: store group: %w", err)
			}
		case domain.Final:
			made = append(made, domain.GroupEnded(e, urls[e.GroupID]))
		case domain.Alert:
			made = append(made, domain.CircuitOpened(e.EventID, e.TenantID, e.GroupID, e.At))
		case domain.Gone:
			delete(urls, e.GroupID)
			if _, err := tx.Exec(ctx, `DELETE FROM `+groups+` WHERE group_id = $1`, e.GroupID); err != nil {
				return fmt.Errorf("webhooks: forget group: %w", err)
			}
		}
	}
	return Notifier(a).storeDeliveries(ctx, tx, made)
}

// loadGroups reads the endpoints of the groups that end in a batch.
func loadGroups(ctx context.Context, tx pgx.Tx, table string, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT group_id, url FROM `+table+` WHERE group_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("webhooks: load groups: %w", err)
	}
	var id, url string
	if _, err := pgx.ForEachRow(rows, []any{&id, &url}, func() error {
		out[id] = url
		return nil
	}); err != nil {
		return nil, fmt.Errorf("webhooks: load groups: %w", err)
	}
	return out, nil
}

// storeDeliveries inserts new deliveries and schedules those that were
// new, in one statement.
func (n Notifier) storeDeliveries(ctx context.Context, tx pgx.Tx, ds []domain.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	k := len(ds)
	ids, evs, tenants, tasks, statuses, urls, bodies := make([]string, k), make([]string, k), make([]string, k), make([]string, k),
		make([]string, k), make([]string, k), make([]string, k)
	subjects, created := make([]string, k), make([]time.Time, k)
	for i, d := range ds {
		ids[i], evs[i], tenants[i], tasks[i], statuses[i], urls[i], bodies[i], created[i] = d.ID, d.EventID, d.TenantID, d.TaskID,
			d.Status, d.URL, d.Body, d.CreatedAt
		subjects[i] = d.Subject
		if subjects[i] == "" {
			subjects[i] = domain.SubjectTask
		}
	}
	rows, err := tx.Query(ctx, `
		WITH made AS (
			INSERT INTO `+pgx.Identifier{n.Tables.Deliveries}.Sanitize()+` (id, event_id, tenant_id, task_id, status, url, body, created_at, subject)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[],
				$10::text[])
			ON CONFLICT (id) DO NOTHING
			RETURNING id, tenant_id, url
		)
		INSERT INTO `+pgx.Identifier{n.Tables.Schedule}.Sanitize()+` (delivery_id, tenant_id, state, next_attempt_at, deadline, updated_at)
		SELECT id, tenant_id,
			CASE WHEN url <> '' OR EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = made.tenant_id AND e.url <> '')
				THEN 'pending' ELSE 'skipped' END,
			now(), now() + $9::interval, now()
		FROM made
		ON CONFLICT (delivery_id) DO NOTHING
		RETURNING state = 'pending'`, ids, evs, tenants, tasks, statuses, urls, bodies, created, n.MaxAge, subjects)
	if err != nil {
		return fmt.Errorf("webhooks: store deliveries: %w", err)
	}
	pending := false
	var p bool
	if _, err := pgx.ForEachRow(rows, []any{&p}, func() error { pending = pending || p; return nil }); err != nil {
		return fmt.Errorf("webhooks: store deliveries: %w", err)
	}
	if pending && n.Scheduled != nil {
		n.Scheduled()
	}
	return nil
}

// Sealer seals signing keys for storage (package secrets).
type Sealer interface {
	Seal(tenant string, plain []byte) ([]byte, error)
	Open(tenant string, sealed []byte) ([]byte, error)
}

// Store is the app's Endpoints, Deliveries and Schedule.
type Store struct {
	DB     *pgxpool.Pool
	Sealer Sealer
}

func endpointOf(tenant, url string, sealed []byte, created, updated *time.Time) app.Endpoint {
	e := app.Endpoint{TenantID: tenant, URL: url, HasSecret: sealed != nil}
	if created != nil {
		e.SecretCreatedAt = created.UTC()
	}
	if updated != nil {
		e.UpdatedAt = updated.UTC()
	}
	return e
}

// Get implements app.Endpoints.
func (s Store) Get(ctx context.Context, tenant string) (app.Endpoint, error) {
	var (
		url              string
		sealed           []byte
		created, updated *time.Time
	)
	err := s.DB.QueryRow(ctx, `SELECT url, secret_sealed, secret_created_at, updated_at FROM webhook_endpoints WHERE tenant_id = $1`,
		tenant).Scan(&url, &sealed, &created, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return app.Endpoint{TenantID: tenant}, nil
	}
	if err != nil {
		return app.Endpoint{}, fmt.Errorf("webhooks: endpoint of %s: %w", tenant, err)
	}
	return endpointOf(tenant, url, sealed, created, updated), nil
}

// SetURL implements app.Endpoints.
func (s Store) SetURL(ctx context.Context, tenant, url string, key []byte, now time.Time) (app.Endpoint, bool, error) {
	sealed, err := s.Sealer.Seal(tenant, key)
	if err != nil {
		return app.Endpoint{}, false, err
	}
	var (
		stored           []byte
		created, updated *time.Time
		fresh            bool
	)
	err = s.DB.QueryRow(ctx, `INSERT INTO webhook_endpoints (tenant_id, url, secret_sealed, secret_created_at, updated_at)
		VALUES ($1, $2, $3, $4, $4)
		ON CONFLICT (tenant_id) DO UPDATE SET url = EXCLUDED.url, updated_at = EXCLUDED.updated_at,
			secret_sealed = coalesce(webhook_endpoints.secret_sealed, EXCLUDED.secret_sealed),
			secret_created_at = coalesce(webhook_endpoints.secret_created_at, EXCLUDED.secret_created_at)
		RETURNING secret_sealed, secret_created_at, updated_at, secret_sealed = $3`, tenant, url, sealed, now).
		Scan(&stored, &created, &updated, &fresh)
	if err != nil {
		return app.Endpoint{}, false, fmt.Errorf("webhooks: set the endpoint of %s: %w", tenant, err)
	}
	return endpointOf(tenant, url, stored, created, updated), fresh, nil
}

// SetKey implements app.Endpoints.
func (s Store) SetKey(ctx context.Context, tenant string, key []byte, now time.Time) (app.Endpoint, error) {
	sealed, err := s.Sealer.Seal(tenant, key)
	if err != nil {
		return app.Endpoint{}, err
	}
	var url string
	err = s.DB.QueryRow(ctx, `INSERT INTO webhook_endpoints (tenant_id, url, secret_sealed, secret_created_at, updated_at)
		VALUES ($1, '', $2, $3, $3)
		ON CONFLICT (tenant_id) DO UPDATE SET secret_sealed = EXCLUDED.secret_sealed, secret_created_at = EXCLUDED.secret_created_at,
			updated_at = EXCLUDED.updated_at
		RETURNING url`, tenant, sealed, now).Scan(&url)
	if err != nil {
		return app.Endpoint{}, fmt.Errorf("webhooks: rotate the key of %s: %w", tenant, err)
	}
	return endpointOf(tenant, url, sealed, &now, &now), nil
}

// EnsureKey implements app.Endpoints.
func (s Store) EnsureKey(ctx context.Context, tenant string, key []byte, now time.Time) ([]byte, error) {
	sealed, err := s.Sealer.Seal(tenant, key)
	if err != nil {
		return nil, err
	}
	var stored []byte
	err = s.DB.QueryRow(ctx, `INSERT INTO webhook_endpoints (tenant_id, url, secret_sealed, secret_created_at, updated_at)
		VALUES ($1, '', $2, $3, $3)
		ON CONFLICT (tenant_id) DO UPDATE SET secret_sealed = coalesce(webhook_endpoints.secret_sealed, EXCLUDED.secret_sealed),
			secret_created_at = coalesce(webhook_endpoints.secret_created_at, EXCLUDED.secret_created_at)
		RETURNING secret_sealed`, tenant, sealed, now).Scan(&stored)
	if err != nil {
		return nil, fmt.Errorf("webhooks: key of %s: %w", tenant, err)
	}
	return s.Sealer.Open(tenant, stored)
}

const viewColumns = `d.id, d.event_id, d.tenant_id, d.task_id, d.status, d.url, d.body, d.created_at,
	s.state, s.attempts, s.next_attempt_at, s.delivered_at, s.last_error`

func scanViews(rows pgx.Rows) ([]app.DeliveryView, error) {
	var out []app.DeliveryView
	for rows.Next() {
		var (
			v         app.DeliveryView
			delivered *time.Time
		)
		if err := rows.Scan(&v.ID, &v.EventID, &v.TenantID, &v.TaskID, &v.Status, &v.URL, &v.Body, &v.CreatedAt,
			&v.State, &v.Attempts, &v.NextAttemptAt, &delivered, &v.LastError); err != nil {
			rows.Close()
			return nil, fmt.Errorf("webhooks: read deliveries: %w", err)
		}
		v.CreatedAt, v.NextAttemptAt = v.CreatedAt.UTC(), v.NextAttemptAt.UTC()
		if delivered != nil {
			v.DeliveredAt = delivered.UTC()
		}
		if v.State == domain.StateSending {
			v.State = domain.StatePending // an attempt in flight: still pending to the tenant
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("webhooks: read deliveries: %w", err)
	}
	return out, nil
}

// List implements app.Deliveries.
func (s Store) List(ctx context.Context, f app.DeliveryFilter) ([]app.DeliveryView, error) {
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if f.Tenant != "" {
		where = append(where, "d.tenant_id = "+arg(f.Tenant))
	}
	switch f.State {
	case "":
		where = append(where, "s.state <> 'skipped'")
	case domain.StatePending:
		where = append(where, "s.state IN ('pending', 'sending')")
	default:
		where = append(where, "s.state = "+arg(f.State))
	}
	if f.TaskID != "" {
		where = append(where, "d.task_id = "+arg(f.TaskID))
	}
	if f.After != nil {
		where = append(where, "(d.created_at, d.id) < ("+arg(f.After.At)+"::timestamptz, "+arg(f.After.ID)+")")
	}
	rows, err := s.DB.Query(ctx, `SELECT `+viewColumns+` FROM webhook_deliveries d JOIN webhook_schedule s ON s.delivery_id = d.id
		WHERE `+strings.Join(where, " AND ")+` ORDER BY d.created_at DESC, d.id DESC LIMIT `+arg(f.PageSize+1), args...)
	if err != nil {
		return nil, fmt.Errorf("webhooks: list deliveries: %w", err)
	}
	return scanViews(rows)
}

// Get implements app.Deliveries.
func (s Store) GetDelivery(ctx context.Context, tenant, id string) (app.DeliveryView, []app.Attempt, error) {
	rows, err := s.DB.Query(ctx, `SELECT `+viewColumns+` FROM webhook_deliveries d JOIN webhook_schedule s ON s.delivery_id = d.id
		WHERE d.id = $1 AND ($2 = '' OR d.tenant_id = $2)`, id, tenant)
	if err != nil {
		return app.DeliveryView{}, nil, fmt.Errorf("webhooks: get delivery: %w", err)
	}
	views, err := scanViews(rows)
	if err != nil {
		return app.DeliveryView{}, nil, err
	}
	if len(views) == 0 {
		return app.DeliveryView{}, nil, app.ErrNotFound
	}
	rows, err = s.DB.Query(ctx, `SELECT number, at, url, http_status, error, duration_ms, response_body
		FROM webhook_attempts WHERE delivery_id = $1 ORDER BY number`, id)
	if err != nil {
		return app.DeliveryView{}, nil, fmt.Errorf("webhooks: attempts: %w", err)
	}
	var attempts []app.Attempt
	var a app.Attempt
	var ms int64
	if _, err := pgx.ForEachRow(rows, []any{&a.Number, &a.At, &a.URL, &a.HTTPStatus, &a.Error, &ms, &a.ResponseBody}, func() error {
		a.DeliveryID, a.At, a.Duration = id, a.At.UTC(), time.Duration(ms)*time.Millisecond
		attempts = append(attempts, a)
		return nil
	}); err != nil {
		return app.DeliveryView{}, nil, fmt.Errorf("webhooks: attempts: %w", err)
	}
	return views[0], attempts, nil
}

// Redeliver implements app.Deliveries.
func (s Store) Redeliver(ctx context.Context, tenant, id string, now, deadline time.Time) (app.DeliveryView, error) {
	tag, err := s.DB.Exec(ctx, `UPDATE webhook_schedule s SET state = 'pending', next_attempt_at = $3, deadline = $4,
			lease_until = NULL, updated_at = $3
		FROM webhook_deliveries d WHERE s.delivery_id = d.id AND d.id = $1 AND ($2 = '' OR d.tenant_id = $2)`, id, tenant, now, deadline)
	if err != nil {
		return app.DeliveryView{}, fmt.Errorf("webhooks: redeliver: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return app.DeliveryView{}, app.ErrNotFound
	}
	v, _, err := s.GetDelivery(ctx, tenant, id)
	return v, err
}

// Claim implements app.Schedule: one statement ranks the due deliveries
// of each tenant, takes them rank by rank (every tenant's first before any
// tenant's second), marks them sending and returns them with the tenant's
// endpoint and sealed key.
func (s Store) Claim(ctx context.Context, now time.Time, n, perTenant int, skip []string, leaseUntil time.Time) ([]app.Due, error) {
	if skip == nil {
		skip = []string{}
	}
	rows, err := s.DB.Query(ctx, `
		WITH due AS (
			SELECT delivery_id, row_number() OVER (PARTITION BY tenant_id ORDER BY next_attempt_at, delivery_id) AS rank
			FROM webhook_schedule
			WHERE ((state = 'pending' AND next_attempt_at <= $1) OR (state = 'sending' AND lease_until < $1))
			  AND NOT (tenant_id = ANY($4::text[]))
		), picked AS (
			SELECT delivery_id FROM due WHERE rank <= $3 ORDER BY rank, delivery_id LIMIT $2
		), claimed AS (
			UPDATE webhook_schedule s SET state = 'sending', lease_until = $5, updated_at = $1
			FROM picked p WHERE s.delivery_id = p.delivery_id
			RETURNING s.delivery_id, s.attempts, s.deadline
		)
		SELECT d.id, d.event_id, d.tenant_id, d.task_id, d.status, d.url, d.body, d.created_at, c.attempts, c.deadline,
			coalesce(e.url, ''), e.secret_sealed
		FROM claimed c JOIN webhook_deliveries d ON d.id = c.delivery_id
		LEFT JOIN webhook_endpoints e ON e.tenant_id = d.tenant_id`, now, n, perTenant, skip, leaseUntil)
	if err != nil {
		return nil, fmt.Errorf("webhooks: claim: %w", err)
	}
	var out []app.Due
	for rows.Next() {
		var (
			x      app.Due
			sealed []byte
		)
		d := &x.Delivery
		if err := rows.Scan(&d.ID, &d.EventID, &d.TenantID, &d.TaskID, &d.Status, &d.URL, &d.Body, &d.CreatedAt, &x.Attempts,
			&x.Deadline, &x.Endpoint, &sealed); err != nil {
			rows.Close()
			return nil, fmt.Errorf("webhooks: claim: %w", err)
		}
		if sealed != nil {
			// One tenant's unreadable key must not hold up the others'
			// deliveries: it fails its own attempts only.
			x.Key, x.KeyErr = s.Sealer.Open(d.TenantID, sealed)
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("webhooks: claim: %w", err)
	}
	return out, nil
}

// Finish implements app.Schedule: the attempts and the deliveries' new
// states in two statements of one transaction.
func (s Store) Finish(ctx context.Context, done []app.Finished) error {
	if len(done) == 0 {
		return nil
	}
	n := len(done)
	ids, urls, errs, bodies, states, lasts := make([]string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n)
	numbers, statuses := make([]int32, n), make([]int32, n)
	durations := make([]int64, n)
	at, next := make([]time.Time, n), make([]time.Time, n)
	delivered := make([]*time.Time, n)
	for i, f := range done {
		a := f.Attempt
		ids[i], urls[i], errs[i], bodies[i] = a.DeliveryID, pg.CleanText(a.URL), pg.CleanText(a.Error), pg.CleanText(a.ResponseBody)
		states[i], lasts[i], numbers[i], statuses[i] = f.State, pg.CleanText(f.LastError), int32(a.Number), int32(a.HTTPStatus)
		durations[i], at[i], next[i] = a.Duration.Milliseconds(), a.At, f.Next
		if next[i].IsZero() {
			next[i] = a.At
		}
		if f.State == domain.StateDelivered {
			delivered[i] = &done[i].Attempt.At
		}
	}
	return pg.InTx(ctx, s.DB, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_attempts (delivery_id, number, at, url, http_status, error, duration_ms, response_body)
			SELECT * FROM unnest($1::text[], $2::int[], $3::timestamptz[], $4::text[], $5::int[], $6::text[], $7::bigint[], $8::text[])
			ON CONFLICT (delivery_id, number) DO NOTHING`, ids, numbers, at, urls, statuses, errs, durations, bodies); err != nil {
			return fmt.Errorf("webhooks: record attempts: %w", err)
		}
		_, err := tx.Exec(ctx, `UPDATE webhook_schedule s SET state = x.state, attempts = x.number, next_attempt_at = x.next,
				lease_until = NULL, delivered_at = coalesce(x.delivered, s.delivered_at), last_error = x.last, updated_at = x.at
			FROM unnest($1::text[], $2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::timestamptz[])
				AS x(id, state, number, next, delivered, last, at)
			WHERE s.delivery_id = x.id`, ids, states, numbers, next, delivered, lasts, at)
		if err != nil {
			return fmt.Errorf("webhooks: move deliveries on: %w", err)
		}
		return nil
	})
}

// NextDue implements app.Schedule.
func (s Store) NextDue(ctx context.Context) (time.Time, bool, error) {
	var at *time.Time
	if err := s.DB.QueryRow(ctx, `SELECT min(next_attempt_at) FROM webhook_schedule WHERE state = 'pending'`).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("webhooks: next due: %w", err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return *at, true, nil
}

// Deliveries adapts Store to app.Deliveries (whose Get reads a delivery,
// where app.Endpoints' Get reads an endpoint).
type Deliveries struct{ Store }

// Get implements app.Deliveries.
func (d Deliveries) Get(ctx context.Context, tenant, id string) (app.DeliveryView, []app.Attempt, error) {
	return d.GetDelivery(ctx, tenant, id)
}
