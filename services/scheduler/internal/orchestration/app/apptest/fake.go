// Package apptest is the test kit of the orchestration use cases: Store, a
// hand-written in-memory fake of GroupStore and TemplateStore (it keeps the
// member tasks too, folds events with the domains' own folds, records
// every call, and can be told to fail), MoveTask to play the agents, and
// the contract suite (StoreContract) that the Postgres adapter and this
// fake must both pass.
package apptest

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// Call is one recorded call: the method and its main argument.
type Call struct{ Method, Arg string }

// Store is the fake. Use NewStore.
type Store struct {
	mu        sync.Mutex
	groups    map[string]orch.State // every member
	requests  map[string]string     // tenant/request id → group id
	tasks     map[string]task.Task
	templates map[string]orch.Template // tenant/id → template (deleted ones kept)
	events    []orch.Record
	calls     []Call
	fail      map[string]error
}

// NewStore returns an empty fake.
func NewStore() *Store {
	return &Store{groups: map[string]orch.State{}, requests: map[string]string{}, tasks: map[string]task.Task{},
		templates: map[string]orch.Template{}, fail: map[string]error{}}
}

// FailOn makes every later call of method fail with err; nil heals it.
func (s *Store) FailOn(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.fail, method)
		return
	}
	s.fail[method] = err
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

// Events returns the group and template events stored so far.
func (s *Store) Events() []orch.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// Task returns a member task as stored, deleted ones included.
func (s *Store) Task(id string) (task.Task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	return t, ok
}

// Tasks returns every task of group id in the order they were created.
func (s *Store) Tasks(groupID string) []task.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []task.Task
	for _, t := range s.tasks {
		if t.Spec.GroupID == groupID {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b task.Task) int { return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID)) })
	return out
}

// ChangeTask applies records to a task, as the task use cases would (an
// agent claiming, starting, completing it).
func (s *Store) ChangeTask(id string, decide func(t task.Task) []task.Record) (task.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok || t.Deleted {
		return task.Task{}, task.ErrNotFound
	}
	for _, r := range decide(t) {
		t = task.Apply(t, r)
	}
	s.tasks[id] = t
	return t, nil
}

func (s *Store) begin(method, arg string) error {
	s.calls = append(s.calls, Call{Method: method, Arg: arg})
	return s.fail[method]
}

// scoped returns a copy of a group with the members of scope.
func scoped(st orch.State, scope oapp.Scope) orch.State {
	out := st.Clone()
	if scope == oapp.Open {
		maps.DeleteFunc(out.Members, func(_ string, m orch.Member) bool { return m.Status.Final() })
	}
	return out
}

// Create implements oapp.GroupStore.
func (s *Store) Create(_ context.Context, n oapp.NewGroup) (orch.State, []task.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := n.State.Group
	if err := s.begin("Create", g.ID); err != nil {
		return orch.State{}, nil, err
	}
	if g.RequestID != "" {
		key := g.TenantID + "/" + g.RequestID
		if prior, ok := s.requests[key]; ok {
			return scoped(s.groups[prior], oapp.All), nil, nil
		}
		s.requests[key] = g.ID
	}
	written, err := s.persist(orch.State{}, n.State, n.Decision)
	return n.State, written, err
}

// persist stores a decision. The caller holds s.mu.
func (s *Store) persist(before, after orch.State, d orch.Decision) ([]task.Task, error) {
	var written []task.Task
	if len(d.CancelTasks)+len(d.DeleteTasks)+len(d.RetryTasks) > 0 {
		last := d.Records[len(d.Records)-1]
		staged := map[string]task.Task{}
		for _, id := range d.RetryTasks {
			t, ok := s.tasks[id]
			if !ok || t.Deleted {
				return nil, fmt.Errorf("member task %s: %w", id, task.ErrNotFound)
			}
			recs, err := t.Retry(last.At, last.Actor)
			if err != nil {
				return nil, err
			}
			for i := range recs {
				recs[i].IP = last.IP
			}
			staged[id] = fold(t, recs)
		}
		for id, reason := range d.CancelTasks {
			t, ok := s.tasks[id]
			if !ok || t.Deleted {
				continue
			}
			recs, err := t.Cancel(last.At, last.Actor, reason)
			if errors.Is(err, task.ErrImmutable) {
				continue
			}
			if err != nil {
				return nil, err
			}
			staged[id] = fold(t, recs)
		}
		for _, id := range d.DeleteTasks {
			t, ok := s.tasks[id]
			if !ok || t.Deleted {
				continue
			}
			recs, err := t.Delete(last.At, last.Actor)
			if err != nil {
				return nil, fmt.Errorf("member task %s: %w", id, err)
			}
			staged[id] = fold(t, recs)
		}
		for _, id := range slices.Sorted(maps.Keys(staged)) {
			s.tasks[id] = staged[id]
			written = append(written, staged[id])
		}
	}
	for _, recs := range d.NewTasks {
		t := fold(task.Task{}, recs)
		s.tasks[t.ID] = t
		written = append(written, t)
	}
	s.events = append(s.events, d.Records...)
	full := s.groups[after.Group.ID]
	if full.Members == nil {
		full.Members = map[string]orch.Member{}
	}
	full.Group = after.Group
	maps.Copy(full.Members, after.Members)
	s.groups[after.Group.ID] = full
	return written, nil
}

func fold(t task.Task, recs []task.Record) task.Task {
	for _, r := range recs {
		t = task.Apply(t, r)
	}
	return t
}

// Get implements oapp.GroupStore.
func (s *Store) Get(_ context.Context, tenant, id string, scope oapp.Scope) (orch.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Get", id); err != nil {
		return orch.State{}, err
	}
	st, ok := s.groups[id]
	if !ok || st.Group.Deleted || (tenant != "*" && st.Group.TenantID != tenant) {
		return orch.State{}, task.ErrNotFound
	}
	return scoped(st, scope), nil
}

// Changed implements oapp.GroupStore.
func (s *Store) Changed(_ context.Context, tenant, id string, since int64) (orch.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Changed", id); err != nil {
		return orch.State{}, err
	}
	st, ok := s.groups[id]
	if !ok || st.Group.Deleted || (tenant != "*" && st.Group.TenantID != tenant) {
		return orch.State{}, task.ErrNotFound
	}
	out := st.Clone()
	maps.DeleteFunc(out.Members, func(_ string, m orch.Member) bool { return m.Version <= since })
	return out, nil
}

// Mutate implements oapp.GroupStore.
func (s *Store) Mutate(_ context.Context, tenant, id string, scope oapp.Scope,
	decide func(st orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error)) (orch.State, []task.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Mutate", id); err != nil {
		return orch.State{}, nil, err
	}
	st, ok := s.groups[id]
	if !ok || st.Group.Deleted || (tenant != "*" && st.Group.TenantID != tenant) {
		return orch.State{}, nil, task.ErrNotFound
	}
	before := scoped(st, scope)
	facts := map[string]orch.Facts{}
	for _, m := range before.Members {
		if !m.Released() {
			continue
		}
		if t, ok := s.tasks[m.TaskID]; ok && !t.Deleted {
			facts[t.ID] = orch.Facts{Status: t.Status, StartedAt: t.StartedAt, EndedAt: t.EndedAt, Error: t.Error}
		}
	}
	after, d, err := decide(before, facts)
	if err != nil {
		return before, nil, err
	}
	if d.Empty() {
		return before, nil, nil
	}
	written, err := s.persist(before, after, d)
	if err != nil {
		return before, nil, err
	}
	return after, written, nil
}

// List implements oapp.GroupStore.
func (s *Store) List(_ context.Context, f oapp.GroupFilter) ([]orch.Group, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("List", f.Tenant); err != nil {
		return nil, "", err
	}
	if f.PageSize <= 0 {
		f.PageSize = 50
	}
	var after *orch.Group
	if f.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(f.PageToken)
		st, ok := s.groups[string(b)]
		if err != nil || !ok {
			return nil, "", oapp.ErrBadPageToken
		}
		after = &st.Group
	}
	var out []orch.Group
	for _, st := range s.groups {
		g := st.Group
		switch {
		case g.Deleted, f.Tenant != "*" && g.TenantID != f.Tenant, f.Status != "" && string(g.Status) != f.Status,
			f.Mode != "" && string(g.Mode) != f.Mode:
			continue
		case after != nil && newer(g, *after) >= 0:
			continue
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b orch.Group) int { return -newer(a, b) })
	out = out[min(f.Offset, len(out)):]
	next := ""
	if len(out) > f.PageSize {
		out = out[:f.PageSize]
		next = base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1].ID))
	}
	return out, next, nil
}

// newer orders groups by (created_at, id).
func newer(a, b orch.Group) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
}

// Due implements oapp.GroupStore.
func (s *Store) Due(_ context.Context, now time.Time, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("Due", ""); err != nil {
		return nil, err
	}
	var out []string
	for id, st := range s.groups {
		if st.Group.Deleted {
			continue
		}
		due := false
		if w := st.Group.NextWake(); !w.IsZero() && !w.After(now) {
			due = true
		}
		for _, m := range st.Members {
			if !m.Released() || m.Status.Final() {
				continue
			}
			if t, ok := s.tasks[m.TaskID]; !ok || t.Deleted || t.Status != m.Status {
				due = true
			}
		}
		if due {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Templates: the fake is also the TemplateStore.

func templateKey(tenant, id string) string { return tenant + "/" + id }

// Templates returns the fake as a TemplateStore (the same store: a
// GroupStore method set and a TemplateStore one share names).
func (s *Store) Templates() oapp.TemplateStore { return templateStore{s} }

type templateStore struct{ s *Store }

// Get implements oapp.TemplateStore.
func (ts templateStore) Get(_ context.Context, tenant, id string) (orch.Template, error) {
	s := ts.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("GetTemplate", id); err != nil {
		return orch.Template{}, err
	}
	t, ok := s.templates[templateKey(tenant, id)]
	if !ok || t.Deleted {
		return orch.Template{}, task.ErrNotFound
	}
	return t, nil
}

// List implements oapp.TemplateStore.
func (ts templateStore) List(_ context.Context, f oapp.TemplateFilter) ([]orch.Template, string, error) {
	s := ts.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("ListTemplates", f.Tenant); err != nil {
		return nil, "", err
	}
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
	var out []orch.Template
	for _, t := range s.templates {
		if t.TenantID == f.Tenant && !t.Deleted && (f.Category == "" || t.Category == f.Category) && t.ID > after {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b orch.Template) int { return cmp.Compare(a.ID, b.ID) })
	next := ""
	if len(out) > f.PageSize {
		out = out[:f.PageSize]
		next = base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1].ID))
	}
	return out, next, nil
}

// Create implements oapp.TemplateStore.
func (ts templateStore) Create(_ context.Context, tenant, id string, recs []orch.Record) (orch.Template, error) {
	s := ts.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("CreateTemplate", id); err != nil {
		return orch.Template{}, err
	}
	cur, ok := s.templates[templateKey(tenant, id)]
	if ok && !cur.Deleted {
		return orch.Template{}, fmt.Errorf("%w: template %q", oapp.ErrExists, id)
	}
	return s.saveTemplate(tenant, id, cur, recs)
}

// Mutate implements oapp.TemplateStore.
func (ts templateStore) Mutate(_ context.Context, tenant, id string, decide func(t orch.Template) ([]orch.Record, error)) (orch.Template, error) {
	s := ts.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin("MutateTemplate", id); err != nil {
		return orch.Template{}, err
	}
	cur, ok := s.templates[templateKey(tenant, id)]
	if !ok || cur.Deleted {
		return orch.Template{}, task.ErrNotFound
	}
	recs, err := decide(cur)
	if err != nil {
		return orch.Template{}, err
	}
	return s.saveTemplate(tenant, id, cur, recs)
}

func (s *Store) saveTemplate(tenant, id string, t orch.Template, recs []orch.Record) (orch.Template, error) {
	for _, r := range recs {
		next, ok := orch.ApplyTemplate(t, r)
		if !ok {
			return orch.Template{}, fmt.Errorf("template %s: %s is not a template event", id, r.Event.EventName())
		}
		next.TenantID = tenant
		t = next
	}
	s.events = append(s.events, recs...)
	s.templates[templateKey(tenant, id)] = t
	return t, nil
}
