package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	mapp "github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
)

// ManagedAggregateType is the event store's aggregate type of managed
// services; the relay routes it to the managed-service topic.
const ManagedAggregateType = "managed_service"

// ManagedStore is the managed-service app's Store over Postgres: events in
// the event store (aggregate managed_service/<id>) and, in the same
// transaction, the managed_services row; the agents' last reports in
// managed_service_reports.
type ManagedStore struct {
	DB *pgxpool.Pool
	// AfterCommit, if set, runs after every committed write.
	AfterCommit func()
}

var _ mapp.Store = (*ManagedStore)(nil)

// inTx runs fn in a transaction (writeTx).
func (s *ManagedStore) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return writeTx(ctx, s.DB, s.AfterCommit, fn)
}

func loadService(ctx context.Context, q groupQuerier, id string, forUpdate bool) (domain.Service, bool, error) {
	lock := ""
	if forUpdate {
		lock = " FOR UPDATE"
	}
	var doc []byte
	err := q.QueryRow(ctx, `SELECT doc FROM managed_services WHERE id = $1`+lock, id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Service{}, false, nil
	}
	if err != nil {
		return domain.Service{}, false, fmt.Errorf("get service %s: %w", id, err)
	}
	var sv domain.Service
	if err := gojson.Unmarshal(doc, &sv); err != nil {
		return domain.Service{}, false, fmt.Errorf("decode service %s: %w", id, err)
	}
	return sv, true, nil
}

// withLiveness sets each instance's At to its agent's last report.
func (s *ManagedStore) withLiveness(ctx context.Context, svcs []domain.Service) error {
	if len(svcs) == 0 {
		return nil
	}
	ids := make([]string, len(svcs))
	for i, sv := range svcs {
		ids[i] = sv.ID
	}
	rows, err := s.DB.Query(ctx, `SELECT service_id, agent_id, at FROM managed_service_reports WHERE service_id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("service reports: %w", err)
	}
	defer rows.Close()
	last := map[[2]string]time.Time{}
	for rows.Next() {
		var id, agent string
		var at time.Time
		if err := rows.Scan(&id, &agent, &at); err != nil {
			return err
		}
		last[[2]string{id, agent}] = at
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range svcs {
		for agent, in := range svcs[i].Instances {
			if at, ok := last[[2]string{svcs[i].ID, agent}]; ok && at.After(in.At) {
				in.At = at
				svcs[i].Instances[agent] = in
			}
		}
	}
	return nil
}

// Get implements mapp.Store.
func (s *ManagedStore) Get(ctx context.Context, tenant, id string) (domain.Service, error) {
	sv, found, err := loadService(ctx, s.DB, id, false)
	if err != nil {
		return domain.Service{}, err
	}
	if !found || sv.Deleted || (tenant != "*" && sv.TenantID != tenant) {
		return domain.Service{}, task.ErrNotFound
	}
	out := []domain.Service{sv}
	if err := s.withLiveness(ctx, out); err != nil {
		return domain.Service{}, err
	}
	return out[0], nil
}

// List implements mapp.Store.
func (s *ManagedStore) List(ctx context.Context, tenant string) ([]domain.Service, error) {
	rows, err := s.DB.Query(ctx, `SELECT doc FROM managed_services WHERE NOT deleted AND ($1 = '*' OR tenant_id = $1)
		ORDER BY name, id LIMIT 10000`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	return s.collect(ctx, rows)
}

// OnAgents implements mapp.Store: the services pinned to the agents
// (managed_services.agent_id) or reported by them (a
// managed_service_reports row, written with each report).
func (s *ManagedStore) OnAgents(ctx context.Context, agentIDs []string) ([]domain.Service, error) {
	rows, err := s.DB.Query(ctx, `SELECT doc FROM managed_services WHERE NOT deleted AND (agent_id = ANY($1)
			OR id IN (SELECT service_id FROM managed_service_reports WHERE agent_id = ANY($1)))
		ORDER BY tenant_id, name, id LIMIT 10000`, agentIDs)
	if err != nil {
		return nil, fmt.Errorf("services on agents: %w", err)
	}
	return s.collect(ctx, rows)
}

// collect decodes rows of managed_services.doc and sets the instances'
// liveness.
func (s *ManagedStore) collect(ctx context.Context, rows pgx.Rows) ([]domain.Service, error) {
	out, err := collectDocs[domain.Service](rows, "service")
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	return out, s.withLiveness(ctx, out)
}

// Create implements mapp.Store.
func (s *ManagedStore) Create(ctx context.Context, recs []domain.Record) (domain.Service, error) {
	var out domain.Service
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = saveService(ctx, tx, domain.Service{}, recs)
		return err
	})
	return out, err
}

// Mutate implements mapp.Store.
func (s *ManagedStore) Mutate(ctx context.Context, tenant, id string, decide func(domain.Service) ([]domain.Record, error)) (domain.Service, error) {
	var out domain.Service
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, found, err := loadService(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if !found || cur.Deleted || (tenant != "*" && cur.TenantID != tenant) {
			return task.ErrNotFound
		}
		recs, err := decide(cur)
		if err != nil {
			return err
		}
		out, err = saveService(ctx, tx, cur, recs)
		return err
	})
	return out, err
}

// saveService appends recs after cur's version and writes the row.
func saveService(ctx context.Context, tx pgx.Tx, cur domain.Service, recs []domain.Record) (domain.Service, error) {
	if len(recs) == 0 {
		return cur, nil
	}
	trace := otel.Inject(ctx)
	sv := cur
	evs := make([]eventstore.Event, len(recs))
	for i, r := range recs {
		next, ok := domain.Apply(sv, r)
		if !ok {
			return domain.Service{}, fmt.Errorf("service %s: %s is not a managed-service event", sv.ID, r.Event.EventName())
		}
		sv = next
		eid := uuid.NewString()
		payload, err := codec.MarshalManaged(eid, sv.ID, sv.TenantID, sv.Version, r, trace)
		if err != nil {
			return domain.Service{}, err
		}
		evs[i] = eventstore.Event{AggregateType: ManagedAggregateType, AggregateID: sv.ID, Version: sv.Version,
			Type: r.Event.EventName(), EventID: eid, TenantID: sv.TenantID, OccurredAt: r.At, Payload: payload, Headers: trace}
	}
	if err := events.Append(ctx, tx, evs...); err != nil {
		return domain.Service{}, err
	}
	return sv, WriteServiceRows(ctx, tx, sv)
}

// WriteServiceRows writes managed_services rows from their state (also the
// rebuild of the inline projection).
func WriteServiceRows(ctx context.Context, tx pgx.Tx, svcs ...domain.Service) error {
	for _, sv := range svcs {
		doc, err := json.Marshal(sv)
		if err != nil {
			return fmt.Errorf("encode service %s: %w", sv.ID, err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO managed_services (id, tenant_id, name, agent_id, deleted, version, doc)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, agent_id = EXCLUDED.agent_id, deleted = EXCLUDED.deleted,
				version = EXCLUDED.version, doc = EXCLUDED.doc`,
			sv.ID, sv.TenantID, sv.Spec.Name, sv.Spec.AgentID, sv.Deleted, sv.Version, doc)
		if err != nil {
			return fmt.Errorf("write service %s: %w", sv.ID, err)
		}
	}
	return nil
}

// Seen implements mapp.Store.
func (s *ManagedStore) Seen(ctx context.Context, agentID string, ids []string, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.DB.Exec(ctx, `INSERT INTO managed_service_reports (service_id, agent_id, at, lost)
		SELECT id, $2, $3, false FROM unnest($1::text[]) AS id
		ON CONFLICT (service_id, agent_id) DO UPDATE SET at = EXCLUDED.at, lost = false`, ids, agentID, at)
	if err != nil {
		return fmt.Errorf("service reports of %s: %w", agentID, err)
	}
	return nil
}

// Silent implements mapp.Store.
func (s *ManagedStore) Silent(ctx context.Context, before time.Time) ([]mapp.Placement, error) {
	rows, err := s.DB.Query(ctx, `SELECT service_id, agent_id FROM managed_service_reports WHERE NOT lost AND at < $1 LIMIT 1000`, before)
	if err != nil {
		return nil, fmt.Errorf("silent services: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (mapp.Placement, error) {
		var p mapp.Placement
		err := r.Scan(&p.ServiceID, &p.AgentID)
		return p, err
	})
}

// MarkLost implements mapp.Store.
func (s *ManagedStore) MarkLost(ctx context.Context, p mapp.Placement) error {
	_, err := s.DB.Exec(ctx, `UPDATE managed_service_reports SET lost = true WHERE service_id = $1 AND agent_id = $2`, p.ServiceID, p.AgentID)
	return err
}

// DecodeServiceDoc reads a managed_services.doc value (for tests and
// tools that read rows directly).
func DecodeServiceDoc(doc []byte) (domain.Service, error) {
	var sv domain.Service
	err := gojson.Unmarshal(doc, &sv)
	return sv, err
}
