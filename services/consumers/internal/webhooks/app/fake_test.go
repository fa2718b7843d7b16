package app_test

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

// store is an in-memory, recording Endpoints, Deliveries and Schedule.
type store struct {
	mu        sync.Mutex
	endpoints map[string]*endpoint
	rows      map[string]*row
	attempts  []app.Attempt
	claims    [][]string // delivery ids of each non-empty claim
}

type endpoint struct {
	app.Endpoint
	key []byte
}

type row struct {
	view     app.DeliveryView
	deadline time.Time
	lease    time.Time
}

func newStore() *store { return &store{endpoints: map[string]*endpoint{}, rows: map[string]*row{}} }

// add schedules d, due at now.
func (s *store) add(d domain.Delivery, now time.Time, maxAge time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[d.ID] = &row{view: app.DeliveryView{Delivery: d, State: domain.StatePending, NextAttemptAt: now}, deadline: now.Add(maxAge)}
}

func (s *store) view(id string) app.DeliveryView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[id].view
}

func (s *store) attemptsOf(id string) []app.Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []app.Attempt
	for _, a := range s.attempts {
		if a.DeliveryID == id {
			out = append(out, a)
		}
	}
	return out
}

func (s *store) Get(_ context.Context, tenant string) (app.Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.endpoints[tenant]; ok {
		return e.Endpoint, nil
	}
	return app.Endpoint{TenantID: tenant}, nil
}

func (s *store) SetURL(_ context.Context, tenant, url string, key []byte, now time.Time) (app.Endpoint, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.endpoints[tenant]
	if !ok {
		e = &endpoint{Endpoint: app.Endpoint{TenantID: tenant}}
		s.endpoints[tenant] = e
	}
	e.URL, e.UpdatedAt = url, now
	created := e.key == nil
	if created {
		e.key, e.HasSecret, e.SecretCreatedAt = key, true, now
	}
	return e.Endpoint, created, nil
}

func (s *store) SetKey(_ context.Context, tenant string, key []byte, now time.Time) (app.Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.endpoints[tenant]
	if !ok {
		e = &endpoint{Endpoint: app.Endpoint{TenantID: tenant}}
		s.endpoints[tenant] = e
	}
	e.key, e.HasSecret, e.SecretCreatedAt, e.UpdatedAt = key, true, now, now
	return e.Endpoint, nil
}

func (s *store) EnsureKey(ctx context.Context, tenant string, key []byte, now time.Time) ([]byte, error) {
	s.mu.Lock()
	if e, ok := s.endpoints[tenant]; ok && e.key != nil {
		s.mu.Unlock()
		return e.key, nil
	}
	s.mu.Unlock()
	_, err := s.SetKey(ctx, tenant, key, now)
	return key, err
}

func (s *store) List(_ context.Context, f app.DeliveryFilter) ([]app.DeliveryView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []app.DeliveryView
	for _, r := range s.rows {
		if (f.Tenant == "" || r.view.TenantID == f.Tenant) && (f.State == "" || r.view.State == f.State) {
			out = append(out, r.view)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	if f.After != nil {
		out = slices.DeleteFunc(out, func(v app.DeliveryView) bool { return v.ID >= f.After.ID })
	}
	return out[:min(len(out), f.PageSize+1)], nil
}

func (s *store) GetDelivery(tenant, id string) (*row, bool) {
	r, ok := s.rows[id]
	if !ok || tenant != "" && r.view.TenantID != tenant {
		return nil, false
	}
	return r, true
}

func (s *store) Redeliver(_ context.Context, tenant, id string, now, deadline time.Time) (app.DeliveryView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.GetDelivery(tenant, id)
	if !ok {
		return app.DeliveryView{}, app.ErrNotFound
	}
	r.view.State, r.view.NextAttemptAt, r.deadline = domain.StatePending, now, deadline
	return r.view, nil
}

func (s *store) Claim(_ context.Context, now time.Time, n, perTenant int, skip []string, leaseUntil time.Time) ([]app.Due, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byTenant := map[string][]*row{}
	for _, r := range s.rows {
		due := r.view.State == domain.StatePending && !r.view.NextAttemptAt.After(now) ||
			r.view.State == domain.StateSending && r.lease.Before(now)
		if due && !slices.Contains(skip, r.view.TenantID) {
			byTenant[r.view.TenantID] = append(byTenant[r.view.TenantID], r)
		}
	}
	var out []app.Due
	var ids []string
	for rank := 0; rank < perTenant && len(out) < n; rank++ {
		tenants := make([]string, 0, len(byTenant))
		for t := range byTenant {
			tenants = append(tenants, t)
		}
		sort.Strings(tenants)
		for _, t := range tenants {
			rows := byTenant[t]
			sort.Slice(rows, func(i, j int) bool { return rows[i].view.ID < rows[j].view.ID })
			if rank < len(rows) && len(out) < n {
				r := rows[rank]
				r.view.State, r.lease = domain.StateSending, leaseUntil
				due := app.Due{Delivery: r.view.Delivery, Attempts: r.view.Attempts, Deadline: r.deadline}
				if e, ok := s.endpoints[t]; ok {
					due.Endpoint, due.Key = e.URL, e.key
				}
				out = append(out, due)
				ids = append(ids, r.view.ID)
			}
		}
	}
	if len(ids) > 0 {
		s.claims = append(s.claims, ids)
	}
	return out, nil
}

func (s *store) Finish(_ context.Context, done []app.Finished) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range done {
		a := f.Attempt
		s.attempts = append(s.attempts, a)
		r := s.rows[a.DeliveryID]
		r.view.State, r.view.Attempts, r.view.NextAttemptAt, r.view.LastError = f.State, a.Number, f.Next, f.LastError
		if f.State == domain.StateDelivered {
			r.view.DeliveredAt = a.At
		}
	}
	return nil
}

func (s *store) NextDue(context.Context) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var at time.Time
	for _, r := range s.rows {
		if r.view.State == domain.StatePending && (at.IsZero() || r.view.NextAttemptAt.Before(at)) {
			at = r.view.NextAttemptAt
		}
	}
	return at, !at.IsZero(), nil
}

// getter adapts store.Get of deliveries (the name is taken by Endpoints).
type deliveries struct{ *store }

func (d deliveries) Get(_ context.Context, tenant, id string) (app.DeliveryView, []app.Attempt, error) {
	d.mu.Lock()
	r, ok := d.GetDelivery(tenant, id)
	d.mu.Unlock()
	if !ok {
		return app.DeliveryView{}, nil, app.ErrNotFound
	}
	return r.view, d.attemptsOf(id), nil
}

// sender records sends and answers with reply (by URL).
type sender struct {
	mu    sync.Mutex
	sent  []sent
	reply func(url string) app.SendResult
}

type sent struct {
	url     string
	headers map[string]string
	body    string
}

func (s *sender) Send(ctx context.Context, url string, headers map[string]string, body []byte) app.SendResult {
	s.mu.Lock()
	s.sent = append(s.sent, sent{url, headers, string(body)})
	reply := s.reply
	s.mu.Unlock()
	return reply(url)
}

func (s *sender) count(url string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, x := range s.sent {
		if x.url == url {
			n++
		}
	}
	return n
}
