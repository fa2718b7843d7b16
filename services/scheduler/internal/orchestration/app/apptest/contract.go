package apptest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// MoveTask is what the agents and the task use cases record to bring a
// pending task to status to at now: a lease, a start, an outcome (exit 0
// for completed, 1 without retries for failed), or a cancellation.
func MoveTask(t task.Task, to task.Status, now time.Time) []task.Record {
	var out []task.Record
	step := func(recs []task.Record, err error) bool {
		if err != nil {
			return false
		}
		for _, r := range recs {
			t = task.Apply(t, r)
		}
		out = append(out, recs...)
		return true
	}
	if to == task.StatusCancelled {
		step(t.Cancel(now, "user", "test"))
		return out
	}
	// Each attempt an id of its own: a retried task runs again.
	if t.Status == task.StatusPending && !step(t.Lease(now, fmt.Sprintf("attempt-%s-%d", t.ID, t.Version), "agent-1", "m1", "")) {
		return out
	}
	if to == task.StatusAssigned {
		return out
	}
	step(t.Start(now, "agent-1", t.AttemptID))
	switch to {
	case task.StatusCompleted:
		recs, _, err := t.Complete(now, "agent-1", t.AttemptID, task.Outcome{EndedAt: now})
		step(recs, err)
	case task.StatusFailed:
		t.Spec.MaxRetries = 0 // no retry follows: the failure is final
		recs, _, err := t.Complete(now, "agent-1", t.AttemptID, task.Outcome{ExitCode: 1, EndedAt: now})
		step(recs, err)
	}
	return out
}

// Subject is one implementation of the orchestration storage under test.
type Subject struct {
	Groups    oapp.GroupStore
	Templates oapp.TemplateStore
	// Move brings member task id to status (MoveTask's records, stored as
	// the task store stores them).
	Move func(t *testing.T, id string, to task.Status, now time.Time)
	// Task reads a task as stored (deleted ones too).
	Task func(t *testing.T, id string) (task.Task, bool)
}

// StoreContract is the behaviour the orchestration use cases rely on from
// their storage, run against a fresh, empty subject for each case. Times
// are whole microseconds (what Postgres keeps).
func StoreContract(t *testing.T, newSubject func(t *testing.T) Subject) {
	cases := []struct {
		name string
		run  func(c *contract, t *testing.T)
	}{
		{"CreateThenGet", (*contract).createThenGet},
		{"CreateIdempotentByRequestID", (*contract).createIdempotent},
		{"MutateSeesFactsAndScope", (*contract).mutateFacts},
		{"ChangedSinceAVersion", (*contract).changedSince},
		{"MutateCancelsOpenTasksOnly", (*contract).mutateCancels},
		{"MutateRetriesTasks", (*contract).mutateRetries},
		{"MutateErrorsStoreNothing", (*contract).mutateErrors},
		{"DeleteRemovesGroupAndTasks", (*contract).deleteGroup},
		{"DueFindsDriftAndWakeTimes", (*contract).due},
		{"ListFiltersAndPages", (*contract).list},
		{"Templates", (*contract).templates},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(&contract{t: t, s: newSubject(t), ctx: context.Background()}, t)
		})
	}
}

// T0 is the contract's clock origin.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type contract struct {
	t   *testing.T
	s   Subject
	ctx context.Context
	ids int
}

func (c *contract) newID() string {
	c.ids++
	return fmt.Sprintf("%08d-0000-7000-8000-%012d", c.ids, c.ids)
}

// dag creates and starts a dag group of tenant: a, then b and c after a.
func (c *contract) dag(tenant, requestID string, at time.Time) (orch.State, []task.Task) {
	c.t.Helper()
	m := func(id string, deps ...string) orch.MemberInput {
		return orch.MemberInput{ID: id, Spec: task.SpecInput{Name: id, Command: "true", DependsOn: deps}}
	}
	def, err := orch.Normalize(orch.Input{Mode: "dag", Tasks: []orch.MemberInput{m("a"), m("b", "a"), m("c", "a")}})
	if err != nil {
		c.t.Fatal(err)
	}
	s, d := orch.Create(at, c.newID(), tenant, "user-"+tenant, requestID, def, true, c.newID)
	st, written, err := c.s.Groups.Create(c.ctx, oapp.NewGroup{State: s, Decision: d})
	if err != nil {
		c.t.Fatal(err)
	}
	return st, written
}

func (c *contract) get(tenant, id string, scope oapp.Scope) orch.State {
	c.t.Helper()
	st, err := c.s.Groups.Get(c.ctx, tenant, id, scope)
	if err != nil {
		c.t.Fatalf("get %s: %v", id, err)
	}
	return st
}

func (c *contract) advance(id string, now time.Time) orch.State {
	c.t.Helper()
	st, _, err := c.s.Groups.Mutate(c.ctx, "*", id, oapp.Open, func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error) {
		next, d := s.Advance(now, facts, c.newID)
		return next, d, nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

func keys(st orch.State) []string {
	var out []string
	for _, m := range st.Ordered() {
		out = append(out, m.Key)
	}
	return out
}

func (c *contract) createThenGet(t *testing.T) {
	st, written := c.dag("tenant-a", "", T0)
	if len(written) != 3 || written[0].Spec.GroupID != st.Group.ID || written[0].TenantID != "tenant-a" {
		t.Fatalf("written %d tasks: %+v", len(written), written)
	}
	got := c.get("tenant-a", st.Group.ID, oapp.All)
	if got.Group.Status != orch.StatusRunning || got.Group.Version != 3 || !slices.Equal(keys(got), []string{"a", "b", "c"}) ||
		got.Members["b"].TaskID == "" || !got.Group.CreatedAt.Equal(T0) {
		t.Fatalf("got %+v", got)
	}
	// Each member's task exists and depends on its dependencies' tasks.
	b, ok := c.s.Task(t, got.Members["b"].TaskID)
	if !ok || !slices.Equal(b.Spec.DependsOn, []string{got.Members["a"].TaskID}) {
		t.Fatalf("task of b = %+v", b)
	}
	if got := c.get("*", st.Group.ID, oapp.Open); len(got.Members) != 3 {
		t.Fatalf("open members %v", keys(got))
	}
	for _, tenant := range []string{"tenant-b"} {
		if _, err := c.s.Groups.Get(c.ctx, tenant, st.Group.ID, oapp.All); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("another tenant's get: %v", err)
		}
	}
	if _, err := c.s.Groups.Get(c.ctx, "tenant-a", "no-such-group", oapp.All); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
}

func (c *contract) createIdempotent(t *testing.T) {
	first, _ := c.dag("tenant-a", "req-1", T0)
	again, written := c.dag("tenant-a", "req-1", T0.Add(time.Second))
	if again.Group.ID != first.Group.ID || len(written) != 0 || len(again.Members) != 3 {
		t.Fatalf("repeat create: %s (first %s), %d written", again.Group.ID, first.Group.ID, len(written))
	}
	other, written := c.dag("tenant-b", "req-1", T0)
	if other.Group.ID == first.Group.ID || len(written) != 3 {
		t.Fatal("another tenant's request id is its own")
	}
}

func (c *contract) mutateFacts(t *testing.T) {
	st, _ := c.dag("tenant-a", "", T0)
	a := st.Members["a"].TaskID
	c.s.Move(t, a, task.StatusCompleted, T0.Add(time.Second))
	var seen orch.Facts
	_, _, err := c.s.Groups.Mutate(c.ctx, "tenant-a", st.Group.ID, oapp.Open, func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error) {
		seen = facts[a]
		next, d := s.Advance(T0.Add(2*time.Second), facts, c.newID)
		return next, d, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen.Status != task.StatusCompleted || !seen.EndedAt.Equal(T0.Add(time.Second)) || !seen.StartedAt.Equal(T0.Add(time.Second)) {
		t.Fatalf("facts of a = %+v", seen)
	}
	if open := c.get("tenant-a", st.Group.ID, oapp.Open); !slices.Equal(keys(open), []string{"b", "c"}) {
		t.Fatalf("open members after a completed: %v", keys(open))
	}
	all := c.get("tenant-a", st.Group.ID, oapp.All)
	if all.Members["a"].Status != task.StatusCompleted || all.Group.Counts[task.StatusCompleted] != 1 || all.Group.Version != 4 {
		t.Fatalf("all = %+v", all)
	}
	// Nothing changed: nothing is stored.
	if again := c.advance(st.Group.ID, T0.Add(3*time.Second)); again.Group.Version != 4 {
		t.Fatalf("an empty decision stored version %d", again.Group.Version)
	}
}

func (c *contract) changedSince(t *testing.T) {
	st, _ := c.dag("tenant-a", "", T0)
	if got, err := c.s.Groups.Changed(c.ctx, "tenant-a", st.Group.ID, st.Group.Version); err != nil || len(got.Members) != 0 ||
		got.Group.Version != st.Group.Version {
		t.Fatalf("nothing changed: %v, %v", keys(got), err)
	}
	c.s.Move(t, st.Members["b"].TaskID, task.StatusRunning, T0.Add(time.Second))
	after := c.advance(st.Group.ID, T0.Add(2*time.Second))
	got, err := c.s.Groups.Changed(c.ctx, "tenant-a", st.Group.ID, st.Group.Version)
	if err != nil || !slices.Equal(keys(got), []string{"b"}) || got.Group.Version != after.Group.Version || got.Members["b"].Status != task.StatusRunning {
		t.Fatalf("changed since %d: %v (version %d), %v", st.Group.Version, keys(got), got.Group.Version, err)
	}
	if all, _ := c.s.Groups.Changed(c.ctx, "*", st.Group.ID, 0); len(all.Members) != 3 {
		t.Fatalf("changed since 0: %v", keys(all))
	}
	if _, err := c.s.Groups.Changed(c.ctx, "tenant-b", st.Group.ID, 0); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("another tenant's: %v", err)
	}
}

func (c *contract) mutateCancels(t *testing.T) {
	st, _ := c.dag("tenant-a", "", T0)
	a, b := st.Members["a"].TaskID, st.Members["b"].TaskID
	c.s.Move(t, a, task.StatusCompleted, T0.Add(time.Second))
	after, written, err := c.s.Groups.Mutate(c.ctx, "tenant-a", st.Group.ID, oapp.Open,
		func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error) {
			next, d, err := s.Cancel(T0.Add(2*time.Second), facts, "user-tenant-a", "stop")
			d.CancelTasks[a] = "stop" // final already: must stay completed
			return next, d, err
		})
	if err != nil {
		t.Fatal(err)
	}
	if after.Group.Status != orch.StatusCancelled || len(written) != 2 {
		t.Fatalf("after %+v, %d written", after.Group, len(written))
	}
	if ta, _ := c.s.Task(t, a); ta.Status != task.StatusCompleted {
		t.Fatalf("a final task was cancelled: %s", ta.Status)
	}
	if tb, _ := c.s.Task(t, b); tb.Status != task.StatusCancelled || tb.Error != "cancelled: group "+st.Group.ID+" cancelled: stop" {
		t.Fatalf("b = %s %q", tb.Status, tb.Error)
	}
}

func (c *contract) mutateRetries(t *testing.T) {
	m := func(id string, deps ...string) orch.MemberInput {
		return orch.MemberInput{ID: id, Spec: task.SpecInput{Name: id, Command: "true", DependsOn: deps}}
	}
	def, err := orch.Normalize(orch.Input{Mode: "dag", Tasks: []orch.MemberInput{m("a"), m("b", "a"), m("x")}})
	if err != nil {
		t.Fatal(err)
	}
	s, d := orch.Create(T0, c.newID(), "tenant-a", "user-tenant-a", "", def, true, c.newID)
	st, _, err := c.s.Groups.Create(c.ctx, oapp.NewGroup{State: s, Decision: d})
	if err != nil {
		t.Fatal(err)
	}
	a, b, x := st.Members["a"].TaskID, st.Members["b"].TaskID, st.Members["x"].TaskID
	c.s.Move(t, x, task.StatusRunning, T0.Add(time.Second))
	c.s.Move(t, a, task.StatusFailed, T0.Add(time.Second))
	c.advance(st.Group.ID, T0.Add(2*time.Second)) // a failed: b cancelled
	c.advance(st.Group.ID, T0.Add(3*time.Second)) // ... and seen so
	retry := func(id string, at time.Time) (orch.State, []task.Task, map[string]orch.Facts, error) {
		var seen map[string]orch.Facts
		after, written, err := c.s.Groups.Mutate(c.ctx, "tenant-a", st.Group.ID, oapp.All,
			func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error) {
				seen = facts
				next, d, err := s.RetryMember(at, facts, "user-tenant-a", id)
				if len(d.Records) > 0 {
					d.Records[len(d.Records)-1].IP = "10.1.2.3"
				}
				return next, d, err
			})
		return after, written, seen, err
	}
	// With every member loaded, every released member has its facts.
	after, written, facts, err := retry(a, T0.Add(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(facts) != 3 || facts[a].Status != task.StatusFailed || facts[b].Status != task.StatusCancelled || facts[x].Status != task.StatusRunning {
		t.Fatalf("facts %+v", facts)
	}
	if len(written) != 2 || after.Members["a"].Status != task.StatusPending || after.Group.Counts[task.StatusPending] != 2 {
		t.Fatalf("after %+v, %d written", after.Group, len(written))
	}
	for _, id := range []string{a, b} {
		tk, _ := c.s.Task(t, id)
		if tk.Status != task.StatusPending || tk.Error != "" || !tk.RetryAt.Equal(T0.Add(4*time.Second)) {
			t.Fatalf("task %s = %s %q (retry at %v)", id, tk.Status, tk.Error, tk.RetryAt)
		}
	}
	if all := c.get("tenant-a", st.Group.ID, oapp.All); all.Members["b"].Status != task.StatusPending || all.Members["b"].Error != "" {
		t.Fatalf("b = %+v", all.Members["b"])
	}
	// A task that is not failed or cancelled is not retried, by the task's
	// rules: nothing is stored.
	version := c.get("tenant-a", st.Group.ID, oapp.All).Group.Version
	_, _, err = c.s.Groups.Mutate(c.ctx, "tenant-a", st.Group.ID, oapp.All,
		func(s orch.State, _ map[string]orch.Facts) (orch.State, orch.Decision, error) {
			return s, orch.Decision{Records: []orch.Record{{Event: orch.Changed{}, At: T0.Add(5 * time.Second)}}, RetryTasks: []string{a}}, nil
		})
	if !errors.Is(err, task.ErrImmutable) || c.get("tenant-a", st.Group.ID, oapp.All).Group.Version != version {
		t.Fatalf("retry of a pending task: %v", err)
	}
}

func (c *contract) mutateErrors(t *testing.T) {
	st, _ := c.dag("tenant-a", "", T0)
	boom := errors.New("boom")
	_, _, err := c.s.Groups.Mutate(c.ctx, "tenant-a", st.Group.ID, oapp.Open,
		func(s orch.State, _ map[string]orch.Facts) (orch.State, orch.Decision, error) {
			return s, orch.Decision{}, boom
		})
	if !errors.Is(err, boom) || c.get("tenant-a", st.Group.ID, oapp.All).Group.Version != 3 {
		t.Fatalf("decide's error: %v", err)
	}
	called := false
	for _, tc := range []struct{ tenant, id string }{{"tenant-b", st.Group.ID}, {"tenant-a", "nope"}} {
		_, _, err := c.s.Groups.Mutate(c.ctx, tc.tenant, tc.id, oapp.Open,
			func(s orch.State, _ map[string]orch.Facts) (orch.State, orch.Decision, error) {
				called = true
				return s, orch.Decision{}, nil
			})
		if !errors.Is(err, task.ErrNotFound) || called {
			t.Fatalf("%s/%s: %v (decide called %v)", tc.tenant, tc.id, err, called)
		}
	}
}

func (c *contract) deleteGroup(t *testing.T) {
	st, _ := c.dag("tenant-a", "", T0)
	a := st.Members["a"].TaskID
	c.s.Move(t, a, task.StatusAssigned, T0.Add(time.Second))
	cancelled, _, err := c.s.Groups.Mutate(c.ctx, "tenant-a", st.Group.ID, oapp.Open,
		func(s orch.State, facts map[string]orch.Facts) (orch.State, orch.Decision, error) {
			return s.Cancel(T0.Add(2*time.Second), facts, "u", "")
		})
	if err != nil || cancelled.Group.Status != orch.StatusCancelled {
		t.Fatal(err)
	}
	del := func(s orch.State, _ map[string]orch.Facts) (orch.State, orch.Decision, error) {
		return s.Delete(T0.Add(3*time.Second), "u")
	}
	if _, _, err := c.s.Groups.Mutate(c.ctx, "tenant-a", st.Group.ID, oapp.All, del); err != nil {
		t.Fatal(err)
	}
	if _, err := c.s.Groups.Get(c.ctx, "tenant-a", st.Group.ID, oapp.All); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if tk, _ := c.s.Task(t, st.Members[k].TaskID); !tk.Deleted {
			t.Fatalf("task of %s not deleted", k)
		}
	}
	// A member task an attempt still holds is cancelled as it is deleted,
	// as a task's own delete cancels it (its attempt is told to stop).
	other, _ := c.dag("tenant-a", "", T0)
	x := other.Members["a"].TaskID
	c.s.Move(t, x, task.StatusRunning, T0.Add(time.Second))
	_, _, err = c.s.Groups.Mutate(c.ctx, "tenant-a", other.Group.ID, oapp.All,
		func(s orch.State, _ map[string]orch.Facts) (orch.State, orch.Decision, error) {
			s.Group.Status = orch.StatusFailed // as if it had ended with its member still running
			return s.Delete(T0.Add(3*time.Second), "u")
		})
	if err != nil {
		t.Fatalf("delete with a running member: %v", err)
	}
	if tk, _ := c.s.Task(t, x); !tk.Deleted || tk.Status != task.StatusCancelled {
		t.Fatalf("the running member after its group's delete: %s, deleted %v; want a cancelled tombstone", tk.Status, tk.Deleted)
	}
	if tk, _ := c.s.Task(t, other.Members["b"].TaskID); !tk.Deleted {
		t.Fatal("the group's other member was not deleted")
	}
}

func (c *contract) due(t *testing.T) {
	st, _ := c.dag("tenant-a", "", T0)
	if ids, err := c.s.Groups.Due(c.ctx, T0, 10); err != nil || len(ids) != 0 {
		t.Fatalf("due before any change: %v, %v", ids, err)
	}
	c.s.Move(t, st.Members["a"].TaskID, task.StatusRunning, T0.Add(time.Second))
	if ids, _ := c.s.Groups.Due(c.ctx, T0, 10); !slices.Equal(ids, []string{st.Group.ID}) {
		t.Fatalf("due after a member moved: %v", ids)
	}
	c.advance(st.Group.ID, T0.Add(2*time.Second))
	if ids, _ := c.s.Groups.Due(c.ctx, T0, 10); len(ids) != 0 {
		t.Fatalf("due after the group saw it: %v", ids)
	}
	// A repeat spacing its runs is due once interval_sec has passed.
	def, err := orch.Normalize(orch.Input{Repeat: &orch.RepeatInput{Count: 3, Parallel: intp(2), IntervalSec: intp(10),
		Spec: task.SpecInput{Name: "r", Command: "true"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, d := orch.Create(T0, c.newID(), "tenant-a", "u", "", def, true, c.newID)
	rep, _, err := c.s.Groups.Create(c.ctx, oapp.NewGroup{State: s, Decision: d})
	if err != nil {
		t.Fatal(err)
	}
	c.s.Move(t, rep.Members["run-1"].TaskID, task.StatusRunning, T0)
	c.advance(rep.Group.ID, T0.Add(time.Second))
	if ids, _ := c.s.Groups.Due(c.ctx, T0.Add(9*time.Second), 10); slices.Contains(ids, rep.Group.ID) {
		t.Fatalf("due before the interval: %v", ids)
	}
	if ids, _ := c.s.Groups.Due(c.ctx, T0.Add(10*time.Second), 10); !slices.Contains(ids, rep.Group.ID) {
		t.Fatalf("not due after the interval: %v", ids)
	}
}

func intp(v int) *int { return &v }

func (c *contract) list(t *testing.T) {
	var ids []string
	for i := range 5 {
		st, _ := c.dag("tenant-a", "", T0.Add(time.Duration(i)*time.Second))
		ids = append(ids, st.Group.ID)
	}
	c.dag("tenant-b", "", T0)
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		page, next, err := c.s.Groups.List(c.ctx, oapp.GroupFilter{Tenant: "tenant-a", PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range page {
			got = append(got, g.ID)
		}
		if next == "" || pages > 5 {
			break
		}
		token = next
	}
	slices.Reverse(ids) // newest first
	if !slices.Equal(got, ids) {
		t.Fatalf("pages %v, want %v", got, ids)
	}
	if l, _, _ := c.s.Groups.List(c.ctx, oapp.GroupFilter{Tenant: "tenant-a", Mode: "serial"}); len(l) != 0 {
		t.Fatalf("mode filter: %d", len(l))
	}
	if l, _, _ := c.s.Groups.List(c.ctx, oapp.GroupFilter{Tenant: "tenant-a", Status: "running"}); len(l) != 5 {
		t.Fatalf("status filter: %d", len(l))
	}
	if _, _, err := c.s.Groups.List(c.ctx, oapp.GroupFilter{Tenant: "tenant-a", PageToken: "!!"}); !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("bad token: %v", err)
	}
}

func (c *contract) templates(t *testing.T) {
	create := func(tenant, id, category string, at time.Time) (orch.Template, error) {
		recs, err := orch.NewTemplate(at, tenant, "user-"+tenant, orch.Template{ID: id, Name: id, Command: "echo",
			Args: []string{"{{x}}"}, Category: category, Variables: []orch.Var{{Name: "x", Type: orch.VarString}}})
		if err != nil {
			t.Fatal(err)
		}
		return c.s.Templates.Create(c.ctx, tenant, id, recs)
	}
	tpl, err := create("tenant-a", "t1", "ml", T0)
	if err != nil || tpl.Version != 1 || tpl.TenantID != "tenant-a" || tpl.CreatedBy != "user-tenant-a" || !tpl.CreatedAt.Equal(T0) {
		t.Fatalf("create: %+v, %v", tpl, err)
	}
	if _, err := create("tenant-a", "t1", "", T0); !errors.Is(err, oapp.ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := create("tenant-b", "t1", "", T0); err != nil {
		t.Fatalf("another tenant's id is its own: %v", err)
	}
	for _, id := range []string{"t2", "t3", "t4"} {
		if _, err := create("tenant-a", id, map[bool]string{true: "ml"}[id == "t3"], T0); err != nil {
			t.Fatal(err)
		}
	}
	page, next, err := c.s.Templates.List(c.ctx, oapp.TemplateFilter{Tenant: "tenant-a", PageSize: 3})
	if err != nil || len(page) != 3 || page[0].ID != "t1" || next == "" {
		t.Fatalf("page 1: %v, %q, %v", page, next, err)
	}
	page, next, _ = c.s.Templates.List(c.ctx, oapp.TemplateFilter{Tenant: "tenant-a", PageSize: 3, PageToken: next})
	if len(page) != 1 || page[0].ID != "t4" || next != "" {
		t.Fatalf("page 2: %v, %q", page, next)
	}
	if ml, _, _ := c.s.Templates.List(c.ctx, oapp.TemplateFilter{Tenant: "tenant-a", Category: "ml"}); len(ml) != 2 {
		t.Fatalf("category: %v", ml)
	}
	up, err := c.s.Templates.Mutate(c.ctx, "tenant-a", "t1", func(cur orch.Template) ([]orch.Record, error) {
		def := cur
		def.Description = "v2"
		return cur.Update(T0.Add(time.Second), "user-x", def, nil)
	})
	if err != nil || up.Description != "v2" || up.Version != 2 || up.CreatedBy != "user-tenant-a" {
		t.Fatalf("update: %+v, %v", up, err)
	}
	if got, _ := c.s.Templates.Get(c.ctx, "tenant-a", "t1"); got.Description != "v2" {
		t.Fatalf("get after update: %+v", got)
	}
	if _, err := c.s.Templates.Mutate(c.ctx, "tenant-a", "t1", func(cur orch.Template) ([]orch.Record, error) {
		return cur.Delete(T0.Add(2*time.Second), "user-x")
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.s.Templates.Get(c.ctx, "tenant-a", "t1"); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := c.s.Templates.Mutate(c.ctx, "tenant-a", "t1", func(cur orch.Template) ([]orch.Record, error) {
		return nil, errors.New("decide must not be called")
	}); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("mutate after delete: %v", err)
	}
	again, err := create("tenant-a", "t1", "", T0.Add(3*time.Second))
	if err != nil || again.Version != 4 || again.Description != "" {
		t.Fatalf("create after delete: %+v, %v", again, err)
	}
	if _, err := c.s.Templates.Get(c.ctx, "tenant-b", "t2"); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("another tenant's template: %v", err)
	}
}
