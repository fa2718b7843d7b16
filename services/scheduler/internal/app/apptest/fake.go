// Package apptest is the test kit of the scheduler's app layer: Store, a
// hand-written, in-memory fake of every storage interface the use cases
// declare (it folds events with domain.Apply like the real store, records
// every call, and can be told to fail), and the contract suite
// (StoreContract) that every implementation of those interfaces must pass
// — the Postgres adapter and this fake alike, so the fake stays faithful.
package apptest

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Call is one recorded call: the method and its main argument (a task id,
// an agent id, a tenant; "" when there is none).
type Call struct {
	Method string
	Arg    string
}

// Store is the fake. Its zero value is not usable: use NewStore.
//
// It answers every query from one map of tasks kept under one mutex, so
// its views are never behind its writes (TaskViews in production is).
// Deleted tasks stay in the map with Deleted set, as rows do.
type Store struct {
	mu      sync.Mutex
	tasks   map[string]domain.Task
	events  []Event
	creates map[string][]string // tenant/request id → task ids
	claims  map[string]claim    // agent/request id → the claim
	agents  map[string]*agent
	drains  map[string]time.Time // agent id → drained since
	locked  bool
	lockErr error // what Alive answers while the lock is held
	calls   []Call
	fail    map[string]error
}

// Event is one stored event of a task.
type Event struct {
	TaskID string
	domain.Record
}

type claim struct {
	ids []string
	at  time.Time
}

type agent struct {
	app.Agent
	firstSeen time.Time
	lost      bool
	// heartbeats: the agent sent a Heartbeat, so its silence makes it lost.
	heartbeats bool
}

// NewStore returns an empty fake.
func NewStore() *Store {
	return &Store{tasks: map[string]domain.Task{}, creates: map[string][]string{}, claims: map[string]claim{},
		agents: map[string]*agent{}, drains: map[string]time.Time{}, fail: map[string]error{}}
}

// Stores wires the fake as every store of app.New.
func (s *Store) Stores() app.Stores {
	return app.Stores{Tasks: s, Views: s, Agents: s, Sweeps: s, Sweeper: s}
}

// FailOn makes every later call of method (e.g. "Mutate") fail with err
// before it does anything; a nil err heals it.
func (s *Store) FailOn(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.fail, method)
		return
	}
	s.fail[method] = err
}

// Calls returns the calls so far, in order.
func (s *Store) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// CallsOf returns the arguments of the calls of method so far.
func (s *Store) CallsOf(method string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.calls {
		if c.Method == method {
			out = append(out, c.Arg)
		}
	}
	return out
}

// Events returns the events stored so far, in order (every task when ids
// is empty).
func (s *Store) Events(ids ...string) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, e := range s.events {
		if len(ids) == 0 || slices.Contains(ids, e.TaskID) {
			out = append(out, e)
		}
	}
	return out
}

// Task returns a task as stored, deleted ones included.
func (s *Store) Task(id string) (domain.Task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	return t, ok
}

// AgentOf returns an agent as its heartbeats left it and whether it is lost.
func (s *Store) AgentOf(id string) (app.Agent, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.agents[id]
	if !ok {
		return app.Agent{}, false, false
	}
	return a.Agent, a.lost, true
}

// LoseLock makes the held sweeper lock report err from Alive, as when its
// session died.
func (s *Store) LoseLock(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lockErr = err
}

// begin records a call and returns the failure installed for it. The
// caller holds s.mu.
func (s *Store) begin(method, arg string) error {
	s.calls = append(s.calls, Call{Method: method, Arg: arg})
	return s.fail[method]
}

// apply folds records into the task and stores them. The caller holds s.mu.
func (s *Store) apply(t domain.Task, recs []domain.Record) domain.Task {
	for _, r := range recs {
		t = domain.Apply(t, r)
		s.events = append(s.events, Event{TaskID: t.ID, Record: r})
	}
	if len(recs) > 0 {
		s.tasks[t.ID] = t
	}
	return t
}

// live returns a task that is not deleted. The caller holds s.mu.
func (s *Store) live(id string) (domain.Task, bool) {
	t, ok := s.tasks[id]
	return t, ok && !t.Deleted
}

// Get implements app.TaskStore.
func (s *Store) Get(_ context.Context, tenant, id string) (domain.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Get", id); err != nil {
		return domain.Task{}, err
	}
	t, ok := s.live(id)
	if !ok || (tenant != "*" && t.TenantID != tenant) {
		return domain.Task{}, domain.ErrNotFound
	}
	return t, nil
}

// GetMany implements app.TaskStore.
func (s *Store) GetMany(_ context.Context, tenant string, ids []string) ([]domain.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("GetMany", strings.Join(ids, ",")); err != nil {
		return nil, err
	}
	var out []domain.Task
	for _, id := range ids {
		if t, ok := s.live(id); ok && (tenant == "*" || t.TenantID == tenant) && !slices.ContainsFunc(out, func(o domain.Task) bool { return o.ID == id }) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Mutate implements app.TaskStore.
func (s *Store) Mutate(_ context.Context, id string, decide func(domain.Task) ([]domain.Record, error)) (domain.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Mutate", id); err != nil {
		return domain.Task{}, err
	}
	t, ok := s.live(id)
	if !ok {
		return domain.Task{}, domain.ErrNotFound
	}
	recs, err := decide(t)
	if err != nil {
		return t, err
	}
	return s.apply(t, recs), nil
}

// Create implements app.TaskStore.
func (s *Store) Create(_ context.Context, n app.NewTasks) ([]domain.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Create", n.Tenant+"/"+n.RequestID); err != nil {
		return nil, err
	}
	key := n.Tenant + "/" + n.RequestID
	if prior, ok := s.creates[key]; ok && n.RequestID != "" {
		if tasks := s.getMany(prior); !n.Rerunnable || !domain.Ended(tasks) {
			return tasks, nil
		}
	}
	ids := make([]string, len(n.Tasks))
	for i, recs := range n.Tasks {
		if len(recs) == 0 {
			return nil, fmt.Errorf("create tasks: a new task needs its TaskSubmitted")
		}
		sub, ok := recs[0].Event.(domain.Submitted)
		if !ok {
			return nil, fmt.Errorf("create tasks: a new task starts with TaskSubmitted, not %s", recs[0].Event.EventName())
		}
		if _, exists := s.tasks[sub.ID]; exists || slices.Contains(ids[:i], sub.ID) {
			return nil, fmt.Errorf("task id %s already exists", sub.ID)
		}
		ids[i] = sub.ID
	}
	out := make([]domain.Task, len(n.Tasks))
	for i, recs := range n.Tasks {
		out[i] = s.apply(domain.Task{}, recs)
	}
	if n.RequestID != "" {
		s.creates[key] = ids
	}
	return out, nil
}

// getMany returns the tasks by id in that order, deleted ones included,
// missing ones skipped (like a join on the ids). The caller holds s.mu.
func (s *Store) getMany(ids []string) []domain.Task {
	var out []domain.Task
	for _, id := range ids {
		if t, ok := s.tasks[id]; ok {
			out = append(out, t)
		}
	}
	return out
}

// Claim implements app.TaskStore.
func (s *Store) Claim(_ context.Context, agentID, requestID string, f app.ClaimFilter,
	lease func([]domain.Task) ([][]domain.Record, error)) ([]domain.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Claim", agentID); err != nil {
		return nil, err
	}
	key := agentID + "/" + requestID
	if prior, ok := s.claims[key]; ok {
		return s.getMany(prior.ids), nil
	}
	if a := s.agents[agentID]; a != nil && a.lost {
		return nil, nil
	}
	candidates := s.candidates(f)
	if len(candidates) == 0 {
		return nil, nil
	}
	leases, err := lease(candidates)
	if err != nil {
		return nil, err
	}
	var out []domain.Task
	ids := []string{}
	for i, t := range candidates {
		if i < len(leases) && len(leases[i]) > 0 {
			t = s.apply(t, leases[i])
			out = append(out, t)
			ids = append(ids, t.ID)
		}
	}
	s.claims[key] = claim{ids: ids, at: f.Now}
	return out, nil
}

// candidates applies app.ClaimFilter. The caller holds s.mu.
func (s *Store) candidates(f app.ClaimFilter) []domain.Task {
	var out []domain.Task
	for _, t := range s.tasks {
		if !t.Claimable(f.Now) || (f.Tenant != "*" && t.TenantID != f.Tenant) || !t.Matches(f.Machine, f.IP, f.Labels, f.Types) {
			continue
		}
		if !s.dependenciesCompleted(t) || s.scatteredOn(t, f.Machine) {
			continue
		}
		out = append(out, t)
	}
	sortByPriority(out)
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out
}

// dependenciesCompleted: every task t depends on exists and completed.
func (s *Store) dependenciesCompleted(t domain.Task) bool {
	for _, id := range t.Spec.DependsOn {
		d, ok := s.tasks[id]
		if !ok || d.Status != domain.StatusCompleted {
			return false
		}
	}
	return true
}

// scatteredOn: a sibling of scatter task t is assigned to machine.
func (s *Store) scatteredOn(t domain.Task, machine string) bool {
	if t.Spec.Mode != domain.ModeScatter {
		return false
	}
	for _, o := range s.tasks {
		if o.ID != t.ID && o.FanoutID == t.FanoutID && o.AssignedMachine == machine {
			return true
		}
	}
	return false
}

// sortByPriority orders tasks by (priority, created_at), then id so the
// fake is deterministic where the real store's order is not defined.
func sortByPriority(ts []domain.Task) {
	slices.SortFunc(ts, func(a, b domain.Task) int {
		return cmp.Or(cmp.Compare(a.Spec.Priority, b.Spec.Priority), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
}

// MissingTasks implements app.TaskStore.
func (s *Store) MissingTasks(_ context.Context, tenant string, ids []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("MissingTasks", tenant); err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		if t, ok := s.live(id); !ok || t.TenantID != tenant {
			out = append(out, id)
		}
	}
	return out, nil
}

// TasksNamed implements app.TaskStore.
func (s *Store) TasksNamed(_ context.Context, tenant string, requestIDs []string) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("TasksNamed", tenant); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range requestIDs {
		if ids := s.creates[tenant+"/"+r]; r != "" && len(ids) > 0 {
			out[r] = ids[0]
		}
	}
	return out, nil
}

// VideoTasksCreatedBefore implements app.TaskStore.
func (s *Store) VideoTasksCreatedBefore(_ context.Context, before time.Time, limit int) ([]domain.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("VideoTasksCreatedBefore", ""); err != nil {
		return nil, err
	}
	var out []domain.Task
	for _, t := range s.tasks {
		if t.Spec.Type == domain.TypeVideo && !t.Deleted && t.CreatedAt.Before(before) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b domain.Task) int { return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID)) })
	return out[:min(len(out), limit)], nil
}

// Unapplied implements app.TaskViews: the fake's list reads the tasks
// themselves, so it never trails a write.
func (s *Store) Unapplied(context.Context, string) ([]app.TaskVersion, error) { return nil, nil }

// Applied implements app.TaskViews.
func (s *Store) Applied(context.Context, []app.TaskVersion) (bool, error) { return true, nil }

// List implements app.TaskViews.
func (s *Store) List(_ context.Context, f app.ListFilter) ([]domain.Task, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("List", f.Tenant); err != nil {
		return nil, "", err
	}
	if f.PageSize <= 0 {
		f.PageSize = 50
	}
	var after *domain.Task
	if f.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(f.PageToken)
		at, id, ok := strings.Cut(string(b), "|")
		when, perr := time.Parse(time.RFC3339Nano, at)
		if err != nil || !ok || id == "" || perr != nil {
			return nil, "", app.ErrBadPageToken
		}
		after = &domain.Task{ID: id, CreatedAt: when}
	}
	var out []domain.Task
	for _, t := range s.tasks {
		if t.Deleted || (f.Tenant != "*" && t.TenantID != f.Tenant) || (f.Status != "" && string(t.Status) != f.Status) ||
			(f.Machine != "" && t.Spec.MachineID != f.Machine && t.AssignedMachine != f.Machine) ||
			(f.Group != "" && t.Spec.GroupID != f.Group) || (f.Priority != 0 && t.Spec.Priority != f.Priority) ||
			(f.Type != "" && t.Spec.Type != f.Type) ||
			(!f.CreatedAfter.IsZero() && t.CreatedAt.Before(f.CreatedAfter)) ||
			(!f.CreatedBefore.IsZero() && !t.CreatedAt.Before(f.CreatedBefore)) ||
			(after != nil && newestFirst(t, *after) <= 0) {
			continue
		}
		out = append(out, t)
	}
	slices.SortFunc(out, newestFirst)
	out = out[min(f.Offset, len(out)):]
	next := ""
	if len(out) > f.PageSize {
		out = out[:f.PageSize]
		last := out[len(out)-1]
		next = base64.RawURLEncoding.EncodeToString([]byte(last.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + last.ID))
	}
	return out, next, nil
}

// newestFirst orders by (created_at, id) descending.
func newestFirst(a, b domain.Task) int {
	return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
}

// Heartbeat implements app.AgentRegistry.
func (s *Store) Heartbeat(_ context.Context, a app.Agent, held []string) (app.HeartbeatReads, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Heartbeat", a.AgentID); err != nil {
		return app.HeartbeatReads{}, err
	}
	a.Labels, a.Warnings = slices.Clone(a.Labels), slices.Clone(a.Warnings)
	s.put(a)
	s.agents[a.AgentID].heartbeats = true
	_, drained := s.drains[a.AgentID]
	r := app.HeartbeatReads{Drained: drained}
	for _, t := range s.tasks {
		if t.AgentID != a.AgentID {
			continue
		}
		switch t.Status {
		case domain.StatusAssigned, domain.StatusRunning, domain.StatusCancelled, domain.StatusPreempted, domain.StatusSuspended:
			if slices.Contains(held, t.AttemptID) {
				r.Held = append(r.Held, t)
			}
		}
		if t.Status == domain.StatusPreempted && t.ClusterQueue != "" {
			r.Preempted = append(r.Preempted, t)
		}
	}
	r.Unheld = s.ids(func(t domain.Task) bool {
		return t.Status == domain.StatusAssigned && t.AgentID == a.AgentID && !slices.Contains(held, t.AttemptID)
	}, nil, -1)
	return r, nil
}

// put records a as the agent's latest state, keeping when it was first
// seen. The caller holds s.mu.
func (s *Store) put(a app.Agent) {
	first, beats := a.LastHeartbeatAt, false
	if old, ok := s.agents[a.AgentID]; ok {
		first, beats = old.firstSeen, old.heartbeats
	}
	s.agents[a.AgentID] = &agent{Agent: a, firstSeen: first, heartbeats: beats}
}

// Seen implements app.AgentRegistry.
func (s *Store) Seen(_ context.Context, a app.Agent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Seen", a.AgentID); err != nil {
		return err
	}
	a.Labels, a.Warnings = slices.Clone(a.Labels), nil
	if old, ok := s.agents[a.AgentID]; ok {
		a.Slots, a.Version, a.Isolation, a.Warnings = old.Slots, old.Version, old.Isolation, old.Warnings
	}
	s.put(a)
	return nil
}

// Fleet implements app.AgentRegistry.
func (s *Store) Fleet(_ context.Context, ids []string) ([]app.FleetAgent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Fleet", strings.Join(ids, ",")); err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for id := range s.agents {
		known[id] = true
	}
	for id := range s.drains {
		known[id] = true
	}
	var out []app.FleetAgent
	for _, id := range slices.Sorted(maps.Keys(known)) {
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		f := app.FleetAgent{Agent: app.Agent{AgentID: id}}
		if a, ok := s.agents[id]; ok {
			f.Agent, f.Seen, f.FirstSeenAt, f.Lost = a.Agent, true, a.firstSeen, a.lost
			f.Labels, f.Warnings = slices.Clone(a.Labels), slices.Clone(a.Warnings)
		}
		if at, ok := s.drains[id]; ok {
			f.Drained, f.DrainedAt = true, at
		}
		f.RunningTaskIDs = s.ids(func(t domain.Task) bool { return t.Status.Leased() && t.AgentID == id }, nil, -1)
		out = append(out, f)
	}
	return out, nil
}

// SetDrained implements app.AgentRegistry.
func (s *Store) SetDrained(_ context.Context, agentID string, drained bool, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("SetDrained", agentID); err != nil {
		return err
	}
	switch _, was := s.drains[agentID]; {
	case !drained:
		delete(s.drains, agentID)
	case !was:
		s.drains[agentID] = at
	}
	return nil
}

// Drained implements app.AgentRegistry.
func (s *Store) Drained(_ context.Context, agentID string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Drained", agentID); err != nil {
		return false, err
	}
	_, ok := s.drains[agentID]
	return ok, nil
}

// Machines implements app.AgentRegistry.
func (s *Store) Machines(_ context.Context, tenant string, labels []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Machines", tenant); err != nil {
		return nil, err
	}
	var out []string
	for _, a := range s.agents {
		if !a.lost && (a.TenantID == "" || a.TenantID == tenant) && hasAll(a.Labels, labels) && !slices.Contains(out, a.MachineID) {
			out = append(out, a.MachineID)
		}
	}
	slices.Sort(out)
	return out, nil
}

func hasAll(have, want []string) bool {
	for _, l := range want {
		if !slices.Contains(have, l) {
			return false
		}
	}
	return true
}

// LostAgents implements app.SweepQueries.
func (s *Store) LostAgents(_ context.Context, now time.Time) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("LostAgents", ""); err != nil {
		return nil, err
	}
	var out []string
	for id, a := range s.agents {
		if !a.lost && a.LostAfter.Before(now) {
			a.lost = true
			if a.heartbeats {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// LatestHeartbeat implements app.SweepQueries.
func (s *Store) LatestHeartbeat(_ context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("LatestHeartbeat", ""); err != nil {
		return time.Time{}, err
	}
	var latest time.Time
	for _, a := range s.agents {
		if a.LastHeartbeatAt.After(latest) {
			latest = a.LastHeartbeatAt
		}
	}
	return latest, nil
}

// LeasesOf implements app.SweepQueries.
func (s *Store) LeasesOf(_ context.Context, agentID string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("LeasesOf", agentID); err != nil {
		return nil, err
	}
	return s.ids(func(t domain.Task) bool { return t.Status.Leased() && t.AgentID == agentID }, nil, -1), nil
}

// ids returns the ids of the tasks keep accepts, ordered by key (id order
// when nil), at most limit of them (all when limit < 0). The caller holds
// s.mu.
func (s *Store) ids(keep func(domain.Task) bool, key func(domain.Task) time.Time, limit int) []string {
	var ts []domain.Task
	for _, t := range s.tasks {
		if keep(t) {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b domain.Task) int {
		if key != nil {
			if c := key(a).Compare(key(b)); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if limit >= 0 && len(ts) > limit {
		ts = ts[:limit]
	}
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// ExpiredLeases implements app.SweepQueries.
func (s *Store) ExpiredLeases(_ context.Context, now time.Time, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("ExpiredLeases", ""); err != nil {
		return nil, err
	}
	return s.ids(func(t domain.Task) bool {
		return t.Status.Leased() && !t.LeaseExpiresAt.IsZero() && t.LeaseExpiresAt.Before(now)
	}, func(t domain.Task) time.Time { return t.LeaseExpiresAt }, limit), nil
}

// timeoutAt is when a running attempt's timeout and grace period are over.
func timeoutAt(t domain.Task) time.Time {
	return t.StartedAt.Add(time.Duration(t.Spec.Timeout+t.Spec.GracePeriod) * time.Second)
}

// Overdue implements app.SweepQueries.
func (s *Store) Overdue(_ context.Context, now time.Time, slack time.Duration, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Overdue", ""); err != nil {
		return nil, err
	}
	return s.ids(func(t domain.Task) bool {
		return t.Status == domain.StatusRunning && !t.StartedAt.IsZero() && timeoutAt(t).Before(now.Add(-slack))
	}, timeoutAt, limit), nil
}

// ReleasablePreempted implements app.SweepQueries.
func (s *Store) ReleasablePreempted(_ context.Context, now time.Time, maxWait time.Duration, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("ReleasablePreempted", ""); err != nil {
		return nil, err
	}
	return s.ids(func(t domain.Task) bool {
		if t.Status != domain.StatusPreempted || t.ClusterQueue != "" {
			return false
		}
		p, ok := s.tasks[t.PreemptedBy]
		return !ok || p.Deleted || p.Status.Final() || t.UpdatedAt.Before(now.Add(-maxWait))
	}, nil, limit), nil
}

// StrandedEvictions implements app.SweepQueries.
func (s *Store) StrandedEvictions(_ context.Context, now time.Time, slack time.Duration, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("StrandedEvictions", ""); err != nil {
		return nil, err
	}
	return s.ids(func(t domain.Task) bool {
		if t.Status != domain.StatusPreempted || t.ClusterQueue == "" {
			return false
		}
		a, ok := s.agents[t.AgentID]
		grace := time.Duration(t.Spec.GracePeriod) * time.Second
		return !ok || a.lost || t.UpdatedAt.Add(grace).Before(now.Add(-slack))
	}, nil, limit), nil
}

// BlockedByFailure implements app.SweepQueries.
func (s *Store) BlockedByFailure(_ context.Context, limit int) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("BlockedByFailure", ""); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, id := range s.ids(func(t domain.Task) bool { return t.Status == domain.StatusPending && !t.Deleted }, nil, -1) {
		if len(out) == limit {
			break
		}
		for _, dep := range s.tasks[id].Spec.DependsOn {
			d, ok := s.tasks[dep]
			if ok && (d.Status == domain.StatusFailed || d.Status == domain.StatusCancelled || d.Deleted) {
				out[id] = dep
				break
			}
		}
	}
	return out, nil
}

// AnyHeld implements app.SweepQueries.
func (s *Store) AnyHeld(context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("AnyHeld", ""); err != nil {
		return false, err
	}
	for _, t := range s.tasks {
		if t.HeldForDependencies && t.Status == domain.StatusPending && !t.Deleted {
			return true, nil
		}
	}
	return false, nil
}

// ReleasableHeld implements app.SweepQueries.
func (s *Store) ReleasableHeld(_ context.Context, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("ReleasableHeld", ""); err != nil {
		return nil, err
	}
	return s.ids(func(t domain.Task) bool {
		if !t.HeldForDependencies || t.Status != domain.StatusPending || t.Deleted {
			return false
		}
		for _, dep := range t.Spec.DependsOn {
			if d, ok := s.tasks[dep]; !ok || d.Status != domain.StatusCompleted {
				return false
			}
		}
		return true
	}, func(t domain.Task) time.Time { return t.CreatedAt }, limit), nil
}

// PreemptionCandidates implements app.SweepQueries.
func (s *Store) PreemptionCandidates(_ context.Context, waitedSince time.Time, gap, limit int) ([]app.Preemption, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("PreemptionCandidates", ""); err != nil {
		return nil, err
	}
	var waiting []domain.Task
	for _, p := range s.tasks {
		if p.Status == domain.StatusPending && !p.Deleted && !p.AwaitingAdmission() && s.dependenciesCompleted(p) &&
			p.CreatedAt.Before(waitedSince) && p.RetryAt.Before(waitedSince) && !s.preemptedFor(p.ID) && !s.couldRun(p) {
			waiting = append(waiting, p)
		}
	}
	sortByPriority(waiting)
	// Up to limit preemptors with a victim each, then one preemptor per
	// victim: a victim already taken leaves its later preemptor waiting.
	var pairs []app.Preemption
	for _, p := range waiting {
		if len(pairs) == limit {
			break
		}
		if v, ok := s.victimFor(p, gap); ok {
			pairs = append(pairs, app.Preemption{Preemptor: p.ID, Priority: p.Spec.Priority, Victim: v})
		}
	}
	var out []app.Preemption
	seen := map[string]bool{}
	for _, p := range pairs {
		if !seen[p.Victim] {
			seen[p.Victim] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// preemptedFor: a task is preempted to make room for id.
func (s *Store) preemptedFor(id string) bool {
	for _, t := range s.tasks {
		if t.Status == domain.StatusPreempted && t.PreemptedBy == id {
			return true
		}
	}
	return false
}

// serves: agent a may run pending task p (tenant, target machine, labels).
func serves(a *agent, p domain.Task) bool {
	return !a.lost && (a.TenantID == "" || a.TenantID == p.TenantID) &&
		(p.Spec.MachineID == "" || p.Spec.MachineID == a.MachineID) && hasAll(a.Labels, p.Spec.Labels)
}

// couldRun: a live agent with a free slot may run p.
func (s *Store) couldRun(p domain.Task) bool {
	for _, a := range s.agents {
		if a.FreeSlots > 0 && serves(a, p) {
			return true
		}
	}
	return false
}

// victimFor returns the leased task p may replace: held by a live agent
// able to run p, priority at least gap lower, the lowest priority first,
// then not yet started, then the most recently started.
func (s *Store) victimFor(p domain.Task, gap int) (string, bool) {
	var best *domain.Task
	for _, r := range s.tasks {
		a, ok := s.agents[r.AgentID]
		if !r.Status.Leased() || r.ClusterQueue != "" || !ok || !serves(a, p) || r.Spec.Priority-p.Spec.Priority < gap {
			continue
		}
		if best == nil || victimBefore(r, *best) {
			r := r
			best = &r
		}
	}
	if best == nil {
		return "", false
	}
	return best.ID, true
}

func victimBefore(a, b domain.Task) bool {
	if a.Spec.Priority != b.Spec.Priority {
		return a.Spec.Priority > b.Spec.Priority
	}
	if a.StartedAt.IsZero() != b.StartedAt.IsZero() {
		return a.StartedAt.IsZero()
	}
	if !a.StartedAt.Equal(b.StartedAt) {
		return a.StartedAt.After(b.StartedAt)
	}
	return a.ID < b.ID
}

// PruneClaims implements app.SweepQueries.
func (s *Store) PruneClaims(_ context.Context, before time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("PruneClaims", ""); err != nil {
		return err
	}
	for k, c := range s.claims {
		if c.at.Before(before) {
			delete(s.claims, k)
		}
	}
	return nil
}

// TryLock implements app.SweeperLock.
func (s *Store) TryLock(context.Context) (app.HeldLock, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("TryLock", ""); err != nil {
		return nil, false, err
	}
	if s.locked {
		return nil, false, nil
	}
	s.locked, s.lockErr = true, nil
	return heldLock{s}, true, nil
}

type heldLock struct{ s *Store }

func (l heldLock) Alive(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.lockErr
}

func (l heldLock) Release() {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.locked = false
	l.s.calls = append(l.s.calls, Call{Method: "Release"})
}
