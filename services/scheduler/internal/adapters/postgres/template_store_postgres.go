package postgres

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	gojson "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// TemplateStore is the orchestration app's TemplateStore over Postgres:
// template events in the event store (aggregate template/<tenant>/<id>)
// and, in the same transaction, the templates row.
type TemplateStore struct {
	DB *pgxpool.Pool
	// AfterCommit, if set, runs after every committed write.
	AfterCommit func()
}

// inTx runs fn in a transaction (writeTx).
func (s *TemplateStore) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return writeTx(ctx, s.DB, s.AfterCommit, fn)
}

// loadTemplate reads a template row, deleted or not (found false when
// there is none).
func loadTemplate(ctx context.Context, q groupQuerier, tenant, id string, forUpdate bool) (orch.Template, bool, error) {
	lock := ""
	if forUpdate {
		lock = " FOR UPDATE"
	}
	var doc []byte
	err := q.QueryRow(ctx, `SELECT doc FROM templates WHERE tenant_id = $1 AND id = $2`+lock, tenant, id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return orch.Template{}, false, nil
	}
	if err != nil {
		return orch.Template{}, false, fmt.Errorf("get template %s: %w", id, err)
	}
	var t orch.Template
	if err := gojson.Unmarshal(doc, &t); err != nil {
		return orch.Template{}, false, fmt.Errorf("decode template %s: %w", id, err)
	}
	return t, true, nil
}

// Get implements oapp.TemplateStore.
func (s *TemplateStore) Get(ctx context.Context, tenant, id string) (orch.Template, error) {
	t, found, err := loadTemplate(ctx, s.DB, tenant, id, false)
	if err != nil {
		return orch.Template{}, err
	}
	if !found || t.Deleted {
		return orch.Template{}, domain.ErrNotFound
	}
	return t, nil
}

// List implements oapp.TemplateStore: pages by id.
func (s *TemplateStore) List(ctx context.Context, f oapp.TemplateFilter) ([]orch.Template, string, error) {
	if f.PageSize <= 0 {
		f.PageSize = 100
	}
	after := ""
	if f.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(f.PageToken)
		if err != nil || len(b) == 0 {
			return nil, "", oapp.ErrBadPageToken
		}
		after = string(b)
	}
	rows, err := s.DB.Query(ctx, `SELECT doc FROM templates WHERE tenant_id = $1 AND NOT deleted
		AND ($2 = '' OR category = $2) AND id > $3 ORDER BY id LIMIT $4`, f.Tenant, f.Category, after, f.PageSize+1)
	if err != nil {
		return nil, "", fmt.Errorf("list templates: %w", err)
	}
	out, err := collectDocs[orch.Template](rows, "template")
	if err != nil {
		return nil, "", fmt.Errorf("list templates: %w", err)
	}
	next := ""
	if len(out) > f.PageSize {
		out = out[:f.PageSize]
		next = base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1].ID))
	}
	return out, next, nil
}

// Create implements oapp.TemplateStore. A deleted template's id may be
// used again: the aggregate's versions go on.
func (s *TemplateStore) Create(ctx context.Context, tenant, id string, recs []orch.Record) (orch.Template, error) {
	var out orch.Template
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, found, err := loadTemplate(ctx, tx, tenant, id, true)
		if err != nil {
			return err
		}
		if found && !cur.Deleted {
			return fmt.Errorf("%w: template %q", oapp.ErrExists, id)
		}
		out, err = saveTemplate(ctx, tx, tenant, id, cur, recs)
		return err
	})
	if errors.Is(err, eventstore.ErrConflict) {
		// A concurrent create of the same id committed first.
		return orch.Template{}, fmt.Errorf("%w: template %q", oapp.ErrExists, id)
	}
	return out, err
}

// Mutate implements oapp.TemplateStore.
func (s *TemplateStore) Mutate(ctx context.Context, tenant, id string, decide func(t orch.Template) ([]orch.Record, error)) (orch.Template, error) {
	var out orch.Template
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, found, err := loadTemplate(ctx, tx, tenant, id, true)
		if err != nil {
			return err
		}
		if !found || cur.Deleted {
			return domain.ErrNotFound
		}
		recs, err := decide(cur)
		if err != nil {
			return err
		}
		out, err = saveTemplate(ctx, tx, tenant, id, cur, recs)
		return err
	})
	return out, err
}

// saveTemplate appends recs after cur's version and writes the row.
func saveTemplate(ctx context.Context, tx pgx.Tx, tenant, id string, cur orch.Template, recs []orch.Record) (orch.Template, error) {
	trace := otel.Inject(ctx)
	agg := orch.TemplateAggregateID(tenant, id)
	t := cur
	evs := make([]eventstore.Event, len(recs))
	for i, r := range recs {
		next, ok := orch.ApplyTemplate(t, r)
		if !ok {
			return orch.Template{}, fmt.Errorf("template %s: %s is not a template event", id, r.Event.EventName())
		}
		next.TenantID = tenant
		t = next
		eid := uuid.NewString()
		payload, err := codec.MarshalOrchestration(eid, agg, tenant, t.Version, r, trace)
		if err != nil {
			return orch.Template{}, err
		}
		evs[i] = eventstore.Event{AggregateType: TemplateAggregateType, AggregateID: agg, Version: t.Version,
			Type: r.Event.EventName(), EventID: eid, TenantID: tenant, OccurredAt: r.At, Payload: payload, Headers: trace}
	}
	if err := events.Append(ctx, tx, evs...); err != nil {
		return orch.Template{}, err
	}
	return t, upsertTemplates(ctx, tx, t)
}

// upsertTemplates writes templates rows from their state (also used to
// rebuild them).
func upsertTemplates(ctx context.Context, tx pgx.Tx, ts ...orch.Template) error {
	for _, t := range ts {
		doc, err := json.Marshal(t)
		if err != nil {
			return fmt.Errorf("encode template %s: %w", t.ID, err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO templates (tenant_id, id, category, deleted, version, doc) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (tenant_id, id) DO UPDATE SET category = EXCLUDED.category, deleted = EXCLUDED.deleted,
				version = EXCLUDED.version, doc = EXCLUDED.doc`, t.TenantID, t.ID, t.Category, t.Deleted, t.Version, doc)
		if err != nil {
			return fmt.Errorf("write template %s: %w", t.ID, err)
		}
	}
	return nil
}

// WriteTemplateRows writes templates rows from their state (the rebuild of
// the inline projection).
func WriteTemplateRows(ctx context.Context, tx pgx.Tx, ts ...orch.Template) error {
	return upsertTemplates(ctx, tx, ts...)
}
