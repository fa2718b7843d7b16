// Package apptest has an in-memory managed-service Store that records
// nothing more than Postgres would keep, and the contract both are held to.
package apptest

import (
	"context"
	"sort"
	"sync"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
)

// Store is an in-memory app.Store.
type Store struct {
	mu      sync.Mutex
	svcs    map[string]domain.Service
	events  map[string][]domain.Record
	reports map[app.Placement]report
}

type report struct {
	at   time.Time
	lost bool
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{svcs: map[string]domain.Service{}, events: map[string][]domain.Record{}, reports: map[app.Placement]report{}}
}

var _ app.Store = (*Store)(nil)

// Events returns the records stored for service id.
func (s *Store) Events(id string) []domain.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]domain.Record(nil), s.events[id]...)
}

func (s *Store) save(cur domain.Service, recs []domain.Record) domain.Service {
	for _, r := range recs {
		cur, _ = domain.Apply(cur, r)
	}
	if len(recs) > 0 {
		s.svcs[cur.ID] = cur
		s.events[cur.ID] = append(s.events[cur.ID], recs...)
	}
	return cur
}

func (s *Store) live(sv domain.Service) domain.Service {
	for agent, in := range sv.Instances {
		if r, ok := s.reports[app.Placement{ServiceID: sv.ID, AgentID: agent}]; ok && r.at.After(in.At) {
			in.At = r.at
			sv.Instances = cloneInstances(sv.Instances)
			sv.Instances[agent] = in
		}
	}
	return sv
}

func cloneInstances(m map[string]domain.Instance) map[string]domain.Instance {
	out := make(map[string]domain.Instance, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Create implements app.Store.
func (s *Store) Create(_ context.Context, recs []domain.Record) (domain.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.save(domain.Service{}, recs), nil
}

func visible(sv domain.Service, ok bool, tenant string) bool {
	return ok && !sv.Deleted && (tenant == "*" || sv.TenantID == tenant)
}

// Get implements app.Store.
func (s *Store) Get(_ context.Context, tenant, id string) (domain.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.svcs[id]
	if !visible(sv, ok, tenant) {
		return domain.Service{}, task.ErrNotFound
	}
	return s.live(sv), nil
}

// List implements app.Store.
func (s *Store) List(_ context.Context, tenant string) ([]domain.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []domain.Service
	for _, sv := range s.svcs {
		if visible(sv, true, tenant) {
			out = append(out, s.live(sv))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Spec.Name != out[j].Spec.Name {
			return out[i].Spec.Name < out[j].Spec.Name
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Mutate implements app.Store.
func (s *Store) Mutate(_ context.Context, tenant, id string, decide func(domain.Service) ([]domain.Record, error)) (domain.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.svcs[id]
	if !visible(sv, ok, tenant) {
		return domain.Service{}, task.ErrNotFound
	}
	recs, err := decide(sv)
	if err != nil {
		return domain.Service{}, err
	}
	return s.save(sv, recs), nil
}

// Seen implements app.Store.
func (s *Store) Seen(_ context.Context, agentID string, ids []string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.reports[app.Placement{ServiceID: id, AgentID: agentID}] = report{at: at}
	}
	return nil
}

// Silent implements app.Store.
func (s *Store) Silent(_ context.Context, before time.Time) ([]app.Placement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []app.Placement
	for p, r := range s.reports {
		if !r.lost && r.at.Before(before) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ServiceID+out[i].AgentID < out[j].ServiceID+out[j].AgentID })
	return out, nil
}

// MarkLost implements app.Store.
func (s *Store) MarkLost(_ context.Context, p app.Placement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.reports[p]; ok {
		r.lost = true
		s.reports[p] = r
	}
	return nil
}
