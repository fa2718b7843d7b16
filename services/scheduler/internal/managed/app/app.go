// Package app holds the managed-service use cases (docs/api/services.md):
// the tenant's declarations, the agents' synchronisation, and the loop
// that marks the services of lost agents unknown. It depends only on the
// Store it declares; the Postgres adapter implements it.
package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
)

// Store keeps the managed-service aggregate: its events and, written with
// them, the services rows; and apart from them the agents' last reports
// (liveness, not events: a steady service costs nothing).
type Store interface {
	// Create stores a new service from its records.
	Create(ctx context.Context, recs []domain.Record) (domain.Service, error)
	// Get returns a service of tenant ("*": any); another tenant's, a
	// deleted and an unknown one are task.ErrNotFound. Each instance's At
	// is its agent's last report.
	Get(ctx context.Context, tenant, id string) (domain.Service, error)
	// List returns tenant's services ("*": every tenant's), by name.
	List(ctx context.Context, tenant string) ([]domain.Service, error)
	// Mutate runs decide on the service's current state (locked) and
	// stores what it recorded; task.ErrNotFound as Get.
	Mutate(ctx context.Context, tenant, id string, decide func(domain.Service) ([]domain.Record, error)) (domain.Service, error)
	// Seen records that agentID reported the services ids at at.
	Seen(ctx context.Context, agentID string, ids []string, at time.Time) error
	// Silent returns the (service, agent) pairs whose last report is
	// before before and that are not yet marked lost; MarkLost marks them.
	Silent(ctx context.Context, before time.Time) ([]Placement, error)
	MarkLost(ctx context.Context, p Placement) error
	// OnAgents returns the services of every tenant, not deleted, that
	// are pinned to one of agentIDs or that one of them has reported, by
	// tenant, name and id; instances' At as Get.
	OnAgents(ctx context.Context, agentIDs []string) ([]domain.Service, error)
}

// Placement is a service on an agent.
type Placement struct{ ServiceID, AgentID string }

// Caller is who calls: a tenant's key, or an agent.
type Caller struct {
	// Tenant scopes what the caller sees; "*" for shared-pool agents.
	Tenant, Subject, AgentID string
}

// ErrForbidden: an agent token acting as another agent.
var ErrForbidden = errors.New("forbidden")

// Config tunes the use cases.
type Config struct {
	// AgentLostAfter: an agent silent this long has lost its services
	// (unknown). Default 15 s, like the task side.
	AgentLostAfter time.Duration
}

// App is the managed-service use cases.
type App struct {
	store Store
	now   func() time.Time
	cfg   Config
	log   *slog.Logger
}

// New returns the use cases over store.
func New(store Store, now func() time.Time, cfg Config, log *slog.Logger) *App {
	if cfg.AgentLostAfter <= 0 {
		cfg.AgentLostAfter = 15 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &App{store: store, now: now, cfg: cfg, log: log}
}

// Create declares a service of the caller's tenant.
func (a *App) Create(ctx context.Context, c Caller, spec domain.Spec) (domain.Service, error) {
	recs, err := domain.New(a.now(), uuid.Must(uuid.NewV7()).String(), c.Tenant, c.Subject, spec)
	if err != nil {
		return domain.Service{}, err
	}
	return a.store.Create(ctx, recs)
}

// Get returns one of the caller's services.
func (a *App) Get(ctx context.Context, c Caller, id string) (domain.Service, error) {
	return a.store.Get(ctx, c.Tenant, id)
}

// List returns the caller's services.
func (a *App) List(ctx context.Context, c Caller) ([]domain.Service, error) {
	return a.store.List(ctx, c.Tenant)
}

// Update changes a service's declaration.
func (a *App) Update(ctx context.Context, c Caller, id string, ch domain.Change) (domain.Service, error) {
	return a.store.Mutate(ctx, c.Tenant, id, func(s domain.Service) ([]domain.Record, error) {
		return s.Update(a.now(), c.Subject, ch)
	})
}

// Delete removes a service; its agents stop it at their next sync.
func (a *App) Delete(ctx context.Context, c Caller, id string) error {
	_, err := a.store.Mutate(ctx, c.Tenant, id, func(s domain.Service) ([]domain.Record, error) {
		return s.Delete(a.now(), c.Subject)
	})
	return err
}

// AgentService is a service as one agent runs it: its declaration and the
// instance that agent last reported (State pending before its first
// report).
type AgentService struct {
	Service  domain.Service
	Instance domain.Instance
}

// OnAgents returns, for operators only, the services on each of agentIDs
// (every tenant's: the fleet is not a tenant's to see), keyed by agent. A
// service targeting an agent by labels shows once the agent reports it.
func (a *App) OnAgents(ctx context.Context, c Caller, agentIDs []string) (map[string][]AgentService, error) {
	if c.Tenant != "*" || c.AgentID != "" {
		return nil, ErrForbidden
	}
	out := map[string][]AgentService{}
	if len(agentIDs) == 0 {
		return out, nil
	}
	svcs, err := a.store.OnAgents(ctx, agentIDs)
	if err != nil {
		return nil, err
	}
	for _, id := range agentIDs {
		for _, s := range svcs {
			in, reported := s.Instances[id]
			if !reported && s.Spec.AgentID != id {
				continue
			}
			if !reported {
				in = domain.Instance{AgentID: id, State: domain.StatePending}
			}
			out[id] = append(out[id], AgentService{Service: s, Instance: in})
		}
	}
	return out, nil
}

// Report is an agent's observation of one service.
type Report struct {
	ServiceID string
	Instance  domain.Instance
}

// errNotTargeted: a report of a service the reporting agent is not meant
// to run.
var errNotTargeted = errors.New("the service does not target the agent")

// Sync records an agent's reports and returns the services it must run:
// those of its tenant (every tenant's for a shared-pool agent) that target
// it. A report counts only for a service of that answer; reports of any
// other service (deleted, another tenant's, or one whose agent_id or
// labels are not the agent's) are ignored: they record nothing and are no
// heartbeat (docs/api/services.md#taskmeshmanagedv1serviceagentservice).
func (a *App) Sync(ctx context.Context, c Caller, agentID string, labels []string, reports []Report) ([]domain.Service, error) {
	if c.AgentID != "" && c.AgentID != agentID {
		return nil, ErrForbidden
	}
	now := a.now()
	seen := make([]string, 0, len(reports))
	for _, r := range reports {
		_, err := a.store.Mutate(ctx, c.Tenant, r.ServiceID, func(s domain.Service) ([]domain.Record, error) {
			if !s.Targets(agentID, labels) {
				return nil, errNotTargeted
			}
			return s.Report(now, agentID, r.Instance), nil
		})
		switch {
		case errors.Is(err, task.ErrNotFound):
			continue // deleted (the agent stops it) or not the tenant's: nothing to record
		case errors.Is(err, errNotTargeted):
			a.log.Debug("managed services: report of a service that does not target the agent ignored",
				"service_id", r.ServiceID, "agent_id", agentID)
			continue
		case err != nil:
			return nil, err
		}
		seen = append(seen, r.ServiceID)
	}
	if err := a.store.Seen(ctx, agentID, seen, now); err != nil {
		return nil, err
	}
	all, err := a.store.List(ctx, c.Tenant)
	if err != nil {
		return nil, err
	}
	var out []domain.Service
	for _, s := range all {
		if s.Targets(agentID, labels) {
			out = append(out, s)
		}
	}
	return out, nil
}

// MarkLost marks the instances of agents silent past AgentLostAfter
// unknown, and reports how many it marked.
func (a *App) MarkLost(ctx context.Context) (int, error) {
	now := a.now()
	silent, err := a.store.Silent(ctx, now.Add(-a.cfg.AgentLostAfter))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range silent {
		_, err := a.store.Mutate(ctx, "*", p.ServiceID, func(s domain.Service) ([]domain.Record, error) {
			return s.AgentLost(now, p.AgentID), nil
		})
		if err != nil && !errors.Is(err, task.ErrNotFound) {
			return n, err
		}
		if err := a.store.MarkLost(ctx, p); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// RunLostSweeper marks lost agents' services unknown every interval until
// ctx ends. Running it on several replicas is harmless: marking is
// idempotent.
func (a *App) RunLostSweeper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := a.MarkLost(ctx); err != nil {
			a.log.Warn("managed services: marking lost agents failed", "err", err)
		} else if n > 0 {
			a.log.Info("managed services: instances of lost agents are unknown", "instances", n)
		}
	}
}
