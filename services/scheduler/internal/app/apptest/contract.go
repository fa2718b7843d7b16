package apptest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Subject is one implementation of the app layer's storage under test.
type Subject struct {
	app.Stores
	// SyncViews brings Views up to every write so far: the Postgres subject
	// does what the task topic's projection would do. nil: Views never
	// trail the writes.
	SyncViews func(t *testing.T)
}

// StoreContract is the behaviour the use cases rely on from their
// storage. It runs every case against a fresh, empty subject from
// newSubject. Times are whole microseconds (what Postgres keeps), and
// where an order is unspecified the cases compare sets.
func StoreContract(t *testing.T, newSubject func(t *testing.T) Subject) {
	cases := []struct {
		name string
		run  func(c *contract, t *testing.T)
	}{
		{"CreateThenGet", (*contract).createThenGet},
		{"CreateAllOrNone", (*contract).createAllOrNone},
		{"CreateIdempotentByRequestID", (*contract).createIdempotent},
		{"CreatedByRequestID", (*contract).tasksNamed},
		{"NamedCreateRunsAgainOnceItsTasksEnded", (*contract).namedCreateRunsAgain},
		{"MutateStoresWhatDecideRecords", (*contract).mutateStores},
		{"MutateErrorsChangeNothing", (*contract).mutateErrors},
		{"MutateUnknownOrDeleted", (*contract).mutateUnknownOrDeleted},
		{"ClaimOrderAndTargeting", (*contract).claimTargeting},
		{"ClaimDependenciesAdmissionRetryAt", (*contract).claimWaiting},
		{"ClaimScatterOnePerMachine", (*contract).claimScatter},
		{"ClaimIdempotentByAgentAndRequestID", (*contract).claimIdempotent},
		{"ClaimLeaseDecides", (*contract).claimLeaseDecides},
		{"ClaimOfALostAgent", (*contract).claimOfALostAgent},
		{"TaskQueries", (*contract).taskQueries},
		{"ListFiltersAndPages", (*contract).listTasks},
		{"AgentsAndMachines", (*contract).agents},
		{"FleetAndDrains", (*contract).fleet},
		{"SweepLeases", (*contract).sweepLeases},
		{"SweepPreempted", (*contract).sweepPreempted},
		{"SweepBlockedByFailure", (*contract).sweepBlocked},
		{"ReleasableHeld", (*contract).releasableHeld},
		{"PreemptionCandidates", (*contract).preemptionCandidates},
		{"PruneClaims", (*contract).pruneClaims},
		{"SweeperLockIsExclusive", (*contract).sweeperLock},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(&contract{t: t, s: newSubject(t), ctx: context.Background()}, t)
		})
	}
}

// T0 is the contract's clock origin (whole microseconds, UTC).
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type contract struct {
	t   *testing.T
	s   Subject
	ctx context.Context
}

// opts adjusts a task's spec input before it is normalized.
type opts = func(*domain.SpecInput)

func intp(v int) *int { return &v }

func prio(p int) opts { return func(in *domain.SpecInput) { in.Priority = &p } }

// Spec returns a normalized shell task spec named name.
func Spec(t testing.TB, name string, o ...func(*domain.SpecInput)) domain.Spec {
	t.Helper()
	in := domain.SpecInput{Name: name, Command: "true"}
	for _, f := range o {
		f(&in)
	}
	s, err := domain.NormalizeSpec(in)
	if err != nil {
		t.Fatalf("spec %s: %v", name, err)
	}
	return s
}

// newTask is the records of one new task of tenant, submitted at at.
func (c *contract) newTask(tenant, id string, at time.Time, o ...opts) []domain.Record {
	return domain.Submit(at, id, tenant, "user", "", "", Spec(c.t, id, o...), "")
}

// create stores one task per records, in one Create each.
func (c *contract) create(tenant string, tasks ...[]domain.Record) {
	c.t.Helper()
	for _, recs := range tasks {
		if _, err := c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: tenant, At: recs[0].At, Tasks: [][]domain.Record{recs}}); err != nil {
			c.t.Fatalf("create: %v", err)
		}
	}
}

// mutate runs a domain command on a task and fails the test on error.
func (c *contract) mutate(id string, cmd func(t domain.Task) ([]domain.Record, error)) domain.Task {
	c.t.Helper()
	t, err := c.s.Tasks.Mutate(c.ctx, id, cmd)
	if err != nil {
		c.t.Fatalf("mutate %s: %v", id, err)
	}
	return t
}

func (c *contract) get(id string) domain.Task {
	c.t.Helper()
	t, err := c.s.Tasks.Get(c.ctx, "*", id)
	if err != nil {
		c.t.Fatalf("get %s: %v", id, err)
	}
	return t
}

// lease leases task id to agent on machine at now (a mutation, not a claim).
func (c *contract) lease(id, agent, machine string, now time.Time) domain.Task {
	return c.mutate(id, func(t domain.Task) ([]domain.Record, error) {
		return t.Lease(now, "att-"+id, agent, machine, "req-"+id)
	})
}

func (c *contract) start(id string, now time.Time) domain.Task {
	return c.mutate(id, func(t domain.Task) ([]domain.Record, error) { return t.Start(now, t.AgentID, t.AttemptID) })
}

func (c *contract) finish(id string, now time.Time, exit int) domain.Task {
	return c.mutate(id, func(t domain.Task) ([]domain.Record, error) {
		recs, _, err := t.Complete(now, t.AgentID, t.AttemptID, domain.Outcome{ExitCode: exit})
		return recs, err
	})
}

func (c *contract) heartbeat(a app.Agent) {
	c.t.Helper()
	if _, err := c.s.Agents.Heartbeat(c.ctx, a, nil); err != nil {
		c.t.Fatalf("heartbeat %s: %v", a.AgentID, err)
	}
}

// claim claims for agent a1 on machine with f (Tenant "*", Limit 10 and
// Now unless set) and leases every candidate.
func (c *contract) claim(agentID, requestID string, f app.ClaimFilter) []domain.Task {
	c.t.Helper()
	if f.Tenant == "" {
		f.Tenant = "*"
	}
	if f.Limit == 0 {
		f.Limit = 10
	}
	if f.Now.IsZero() {
		f.Now = T0.Add(time.Minute)
	}
	out, err := c.s.Tasks.Claim(c.ctx, agentID, requestID, f, leaseAll(f.Now, agentID, f.Machine, requestID))
	if err != nil {
		c.t.Fatalf("claim: %v", err)
	}
	return out
}

func leaseAll(now time.Time, agentID, machine, requestID string) func([]domain.Task) ([][]domain.Record, error) {
	return func(cands []domain.Task) ([][]domain.Record, error) {
		out := make([][]domain.Record, len(cands))
		for i, t := range cands {
			recs, err := t.Lease(now, "att-"+t.ID+"-"+requestID, agentID, machine, requestID)
			if err != nil {
				return nil, err
			}
			out[i] = recs
		}
		return out, nil
	}
}

func ids(ts []domain.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func (c *contract) wantIDs(what string, got, want []string) {
	c.t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		c.t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func (c *contract) wantSet(what string, got, want []string) {
	c.t.Helper()
	got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	c.wantIDs(what, got, want)
}

func (c *contract) wantErr(what string, err, want error) {
	c.t.Helper()
	if !errors.Is(err, want) {
		c.t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

func (c *contract) createThenGet(t *testing.T) {
	out, err := c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: "t1", At: T0, Tasks: [][]domain.Record{c.newTask("t1", "a", T0)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].ID != "a" || out[0].Status != domain.StatusPending || out[0].Version != 1 ||
		out[0].TenantID != "t1" || !out[0].CreatedAt.Equal(T0) {
		t.Fatalf("created %+v", out)
	}
	for _, tenant := range []string{"t1", "*"} {
		got, err := c.s.Tasks.Get(c.ctx, tenant, "a")
		if err != nil || got.ID != "a" || got.Version != 1 || got.Spec.Name != "a" {
			t.Errorf("Get(%s) = %+v, %v", tenant, got, err)
		}
	}
	_, err = c.s.Tasks.Get(c.ctx, "t2", "a")
	c.wantErr("another tenant's task", err, domain.ErrNotFound)
	_, err = c.s.Tasks.Get(c.ctx, "*", "nope")
	c.wantErr("unknown task", err, domain.ErrNotFound)
	// An id that exists already is refused, alone or in a batch.
	_, err = c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: "t1", At: T0, Tasks: [][]domain.Record{c.newTask("t1", "a", T0)}})
	if err == nil {
		t.Error("a second task with id a was created")
	}
}

func (c *contract) createAllOrNone(t *testing.T) {
	c.create("t1", c.newTask("t1", "a", T0))
	out, err := c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: "t1", At: T0,
		Tasks: [][]domain.Record{c.newTask("t1", "b", T0), c.newTask("t1", "c", T0)}})
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("created", ids(out), []string{"b", "c"})
	_, err = c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: "t1", At: T0,
		Tasks: [][]domain.Record{c.newTask("t1", "d", T0), c.newTask("t1", "a", T0)}})
	if err == nil {
		t.Fatal("a batch with an existing id was created")
	}
	_, err = c.s.Tasks.Get(c.ctx, "*", "d")
	c.wantErr("the rest of a refused batch", err, domain.ErrNotFound)
}

func (c *contract) createIdempotent(t *testing.T) {
	first, err := c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: "t1", RequestID: "r1", At: T0,
		Tasks: [][]domain.Record{c.newTask("t1", "a", T0), c.newTask("t1", "b", T0)}})
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("first create", ids(first), []string{"a", "b"})
	c.mutate("a", func(t domain.Task) ([]domain.Record, error) { return t.Cancel(T0, "user", "") })
	again, err := c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: "t1", RequestID: "r1", At: T0.Add(time.Second),
		Tasks: [][]domain.Record{c.newTask("t1", "x", T0)}})
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("repeated create", ids(again), []string{"a", "b"})
	if again[0].Status != domain.StatusCancelled {
		t.Errorf("a repeated create shows the tasks as they are now: a is %s", again[0].Status)
	}
	if _, err := c.s.Tasks.Get(c.ctx, "*", "x"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("a repeated create stored a task: %v", err)
	}
	// One task with a request id is idempotent too; other tenants have
	// request ids of their own.
	for _, tc := range []struct{ tenant, id string }{{"t1", "s1"}, {"t1", "s2"}, {"t2", "s3"}} {
		req := "r2"
		out, err := c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: tc.tenant, RequestID: req, At: T0,
			Tasks: [][]domain.Record{c.newTask(tc.tenant, tc.id, T0)}})
		if err != nil {
			t.Fatal(err)
		}
		want := "s1"
		if tc.tenant == "t2" {
			want = "s3"
		}
		c.wantIDs(fmt.Sprintf("create %s by %s", tc.id, tc.tenant), ids(out), []string{want})
	}
}

// namedCreateRunsAgain: a task file's name answers its tasks while one of
// them has not ended, and creates new ones (and names them) once all
// have; a plain request id answers its first create's tasks for good.
func (c *contract) namedCreateRunsAgain(t *testing.T) {
	create := func(name string, rerunnable bool, taskIDs ...string) []string {
		t.Helper()
		n := app.NewTasks{Tenant: "t1", RequestID: name, Rerunnable: rerunnable, At: T0}
		for _, id := range taskIDs {
			n.Tasks = append(n.Tasks, c.newTask("t1", id, T0))
		}
		out, err := c.s.Tasks.Create(c.ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		return ids(out)
	}
	cancel := func(id string) {
		c.mutate(id, func(t domain.Task) ([]domain.Record, error) { return t.Cancel(T0, "user", "") })
	}
	named := func(name string) string {
		t.Helper()
		m, err := c.s.Tasks.TasksNamed(c.ctx, "t1", []string{name})
		if err != nil {
			t.Fatal(err)
		}
		return m[name]
	}
	c.wantIDs("first create", create("train", true, "a"), []string{"a"})
	c.wantIDs("again while a waits", create("train", true, "x"), []string{"a"})
	if _, err := c.s.Tasks.Get(c.ctx, "*", "x"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("a create answered with the waiting task stored one: %v", err)
	}
	cancel("a")
	c.wantIDs("again once a was cancelled", create("train", true, "y"), []string{"y"})
	if got := named("train"); got != "y" {
		t.Errorf("the name names %q, want the new task y", got)
	}
	c.wantIDs("again while y waits", create("train", true, "z"), []string{"y"})

	// A fan-out runs again only when every task of it ended.
	c.wantIDs("fan-out", create("fan", true, "f1", "f2"), []string{"f1", "f2"})
	cancel("f1")
	c.wantIDs("again with f2 waiting", create("fan", true, "g1"), []string{"f1", "f2"})
	cancel("f2")
	c.wantIDs("again once both ended", create("fan", true, "g2"), []string{"g2"})

	// A retry key is never reused, whatever became of its tasks.
	c.wantIDs("request id", create("req", false, "r1"), []string{"r1"})
	cancel("r1")
	c.wantIDs("request id again", create("req", false, "r2"), []string{"r1"})
}

// tasksNamed maps a tenant's request ids to the first task of their
// creates; other tenants' request ids and creates without one map to
// nothing.
func (c *contract) tasksNamed(t *testing.T) {
	for _, n := range []app.NewTasks{
		{Tenant: "t1", RequestID: "fan", At: T0, Tasks: [][]domain.Record{c.newTask("t1", "a", T0), c.newTask("t1", "b", T0)}},
		{Tenant: "t1", RequestID: "one", At: T0, Tasks: [][]domain.Record{c.newTask("t1", "c", T0)}},
		{Tenant: "t2", RequestID: "theirs", At: T0, Tasks: [][]domain.Record{c.newTask("t2", "d", T0)}},
		{Tenant: "t1", At: T0, Tasks: [][]domain.Record{c.newTask("t1", "e", T0)}},
	} {
		if _, err := c.s.Tasks.Create(c.ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.s.Tasks.TasksNamed(c.ctx, "t1", []string{"fan", "one", "theirs", "e", "none"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"fan": "a", "one": "c"}; !maps.Equal(got, want) {
		t.Errorf("t1's request ids = %v, want %v", got, want)
	}
	if got, err := c.s.Tasks.TasksNamed(c.ctx, "t2", []string{"fan", "theirs"}); err != nil || !maps.Equal(got, map[string]string{"theirs": "d"}) {
		t.Errorf("t2's request ids = %v, %v", got, err)
	}
}

func (c *contract) mutateStores(t *testing.T) {
	c.create("t1", c.newTask("t1", "a", T0))
	var seen domain.Task
	after, err := c.s.Tasks.Mutate(c.ctx, "a", func(t domain.Task) ([]domain.Record, error) {
		seen = t
		return t.Cancel(T0.Add(time.Second), "user", "no longer needed")
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen.ID != "a" || seen.Status != domain.StatusPending || seen.Version != 1 {
		t.Errorf("decide saw %+v", seen)
	}
	if after.Status != domain.StatusCancelled || after.Version != 2 || after.Error != "cancelled: no longer needed" {
		t.Errorf("after = %+v", after)
	}
	if got := c.get("a"); got.Status != domain.StatusCancelled || got.Version != 2 || !got.UpdatedAt.Equal(T0.Add(time.Second)) {
		t.Errorf("stored = %+v", got)
	}
	// Several records at once; nothing recorded changes nothing.
	after = c.mutate("a", func(t domain.Task) ([]domain.Record, error) { return t.Expire(T0.Add(2*time.Second), "video") })
	if after.Version != 3 || !after.Deleted {
		t.Errorf("after expiry = %+v", after)
	}
	c.create("t1", c.newTask("t1", "b", T0))
	same := c.mutate("b", func(domain.Task) ([]domain.Record, error) { return nil, nil })
	if same.Version != 1 || same.Status != domain.StatusPending || c.get("b").Version != 1 {
		t.Errorf("an empty decision changed the task: %+v", same)
	}
}

func (c *contract) mutateErrors(t *testing.T) {
	c.create("t1", c.newTask("t1", "a", T0))
	boom := errors.New("boom")
	_, err := c.s.Tasks.Mutate(c.ctx, "a", func(domain.Task) ([]domain.Record, error) { return nil, boom })
	c.wantErr("decide's error", err, boom)
	_, err = c.s.Tasks.Mutate(c.ctx, "a", func(t domain.Task) ([]domain.Record, error) {
		return t.Start(T0, "agent", "att") // not leased: fencing refuses
	})
	c.wantErr("a refused command", err, domain.ErrAttemptMismatch)
	if got := c.get("a"); got.Version != 1 || got.Status != domain.StatusPending {
		t.Errorf("a failed decision changed the task: %+v", got)
	}
}

func (c *contract) mutateUnknownOrDeleted(t *testing.T) {
	called := false
	decide := func(domain.Task) ([]domain.Record, error) { called = true; return nil, nil }
	_, err := c.s.Tasks.Mutate(c.ctx, "nope", decide)
	c.wantErr("unknown task", err, domain.ErrNotFound)
	c.create("t1", c.newTask("t1", "a", T0))
	c.mutate("a", func(t domain.Task) ([]domain.Record, error) { return t.Delete(T0, "user") })
	_, err = c.s.Tasks.Mutate(c.ctx, "a", decide)
	c.wantErr("deleted task", err, domain.ErrNotFound)
	_, err = c.s.Tasks.Get(c.ctx, "t1", "a")
	c.wantErr("get deleted task", err, domain.ErrNotFound)
	if called {
		t.Error("decide ran on a task that does not exist")
	}
}

func (c *contract) claimTargeting(t *testing.T) {
	c.create("t1",
		c.newTask("t1", "low", T0, prio(5)),
		c.newTask("t1", "high", T0.Add(time.Second), prio(1)),
		c.newTask("t1", "later", T0.Add(2*time.Second), prio(5)),
		c.newTask("t1", "on-m2", T0, func(in *domain.SpecInput) { in.MachineID = "m2" }),
		c.newTask("t1", "gpu", T0, func(in *domain.SpecInput) { in.Labels = []string{"gpu"} }),
		c.newTask("t1", "python", T0, func(in *domain.SpecInput) { in.Type = domain.TypePython }),
	)
	c.create("t2", c.newTask("t2", "other-tenant", T0))
	ipTask := c.newTask("t1", "on-ip", T0)
	sub := ipTask[0].Event.(domain.Submitted)
	sub.Spec.TargetIP = "10.0.0.9"
	ipTask[0].Event = sub
	c.create("t1", ipTask)

	got := c.claim("a1", "r1", app.ClaimFilter{Tenant: "t1", Machine: "m1", IP: "10.0.0.1", Types: []string{"shell"}, Limit: 2})
	c.wantIDs("first claim (priority, then age; limit 2)", ids(got), []string{"high", "low"})
	for _, x := range got {
		if x.Status != domain.StatusAssigned || x.AgentID != "a1" || x.AssignedMachine != "m1" || x.AttemptID == "" {
			t.Errorf("claimed %+v", x)
		}
		if s := c.get(x.ID); s.Status != domain.StatusAssigned || s.AttemptID != x.AttemptID {
			t.Errorf("stored %s: %+v", x.ID, s)
		}
	}
	got = c.claim("a1", "r2", app.ClaimFilter{Tenant: "t1", Machine: "m1", IP: "10.0.0.1", Types: []string{"shell"}})
	c.wantIDs("second claim", ids(got), []string{"later"})
	got = c.claim("a2", "r1", app.ClaimFilter{Tenant: "t1", Machine: "m2", IP: "10.0.0.9", Labels: []string{"gpu", "ssd"}})
	c.wantSet("a gpu agent on m2 at 10.0.0.9, any type", ids(got), []string{"on-m2", "gpu", "python", "on-ip"})
	got = c.claim("a3", "r1", app.ClaimFilter{Tenant: "*", Machine: "m3"})
	c.wantIDs("a shared-pool agent", ids(got), []string{"other-tenant"})
	got = c.claim("a3", "r2", app.ClaimFilter{Tenant: "*", Machine: "m3"})
	c.wantIDs("nothing left", ids(got), nil)
}

func (c *contract) claimWaiting(t *testing.T) {
	now := T0.Add(time.Minute)
	c.create("t1",
		c.newTask("t1", "dep", T0),
		c.newTask("t1", "after-dep", T0, func(in *domain.SpecInput) { in.DependsOn = []string{"dep"} }),
		c.newTask("t1", "future", now.Add(time.Second)), // retry_at (= created_at) not yet due
	)
	queued := domain.Submit(T0, "queued", "t1", "user", "", "", Spec(t, "queued"), "cq1")
	c.create("t1", queued)

	got := c.claim("a1", "r1", app.ClaimFilter{Machine: "m1", Limit: 1, Now: now})
	c.wantIDs("only the dependency is claimable", ids(got), []string{"dep"})
	got = c.claim("a1", "r2", app.ClaimFilter{Machine: "m1", Now: now})
	c.wantIDs("dependency not completed, admission pending, not due", ids(got), nil)

	c.start("dep", now)
	c.finish("dep", now, 0)
	c.mutate("queued", func(t domain.Task) ([]domain.Record, error) {
		return t.Admit(now, t.AdmissionEpoch, "cq1", map[string]string{"gpu": "a100"}), nil
	})
	got = c.claim("a1", "r3", app.ClaimFilter{Machine: "m1", Now: now})
	c.wantSet("completed dependency, admitted", ids(got), []string{"after-dep", "queued"})
	got = c.claim("a1", "r4", app.ClaimFilter{Machine: "m1", Now: now.Add(time.Second)})
	c.wantIDs("due at its retry_at", ids(got), []string{"future"})
}

func (c *contract) claimScatter(t *testing.T) {
	spec := Spec(t, "scatter", func(in *domain.SpecInput) { in.Mode = domain.ModeScatter; in.ScatterCount = 2 })
	_, err := c.s.Tasks.Create(c.ctx, app.NewTasks{Tenant: "t1", At: T0, Tasks: [][]domain.Record{
		domain.Submit(T0, "s1", "t1", "user", "", "fan", spec, ""),
		domain.Submit(T0.Add(time.Second), "s2", "t1", "user", "", "fan", spec, ""),
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := c.claim("a1", "r1", app.ClaimFilter{Machine: "m1", Limit: 1})
	c.wantIDs("m1's first claim", ids(got), []string{"s1"})
	got = c.claim("a1", "r2", app.ClaimFilter{Machine: "m1"})
	c.wantIDs("a sibling already runs on m1", ids(got), nil)
	got = c.claim("a2", "r1", app.ClaimFilter{Machine: "m2"})
	c.wantIDs("m2", ids(got), []string{"s2"})
}

func (c *contract) claimIdempotent(t *testing.T) {
	c.create("t1", c.newTask("t1", "a", T0), c.newTask("t1", "b", T0.Add(time.Second)))
	first := c.claim("a1", "r1", app.ClaimFilter{Machine: "m1", Limit: 1})
	c.wantIDs("first claim", ids(first), []string{"a"})
	c.create("t1", c.newTask("t1", "c", T0))
	again := c.claim("a1", "r1", app.ClaimFilter{Machine: "m1", Limit: 5})
	c.wantIDs("the same claim again", ids(again), []string{"a"})
	if again[0].AttemptID != first[0].AttemptID || again[0].Version != first[0].Version {
		t.Errorf("a repeated claim leased again: %+v, first %+v", again[0], first[0])
	}
	other := c.claim("a2", "r1", app.ClaimFilter{Machine: "m2", Limit: 5})
	c.wantIDs("another agent's request r1", ids(other), []string{"c", "b"})
	// A claim that found nothing is not remembered.
	empty := c.claim("a1", "r9", app.ClaimFilter{Machine: "m1"})
	c.wantIDs("empty claim", ids(empty), nil)
	c.create("t1", c.newTask("t1", "d", T0))
	c.wantIDs("the empty claim's retry", ids(c.claim("a1", "r9", app.ClaimFilter{Machine: "m1"})), []string{"d"})
}

// An agent the sweeper found lost gets nothing from a claim, and nothing
// is leased or remembered, until it is heard from again.
func (c *contract) claimOfALostAgent(t *testing.T) {
	c.create("t1", c.newTask("t1", "a", T0))
	c.heartbeat(app.Agent{AgentID: "a1", MachineID: "m1", LastHeartbeatAt: T0, LostAfter: T0.Add(15 * time.Second)})
	if _, err := c.s.Sweeps.LostAgents(c.ctx, T0.Add(16*time.Second)); err != nil {
		t.Fatal(err)
	}
	c.wantIDs("a lost agent's claim", ids(c.claim("a1", "r1", app.ClaimFilter{Machine: "m1"})), nil)
	if c.get("a").Status != domain.StatusPending {
		t.Error("a lost agent's claim leased a task")
	}
	// Another agent's claim is not held back.
	c.wantIDs("another agent's claim", ids(c.claim("a2", "r1", app.ClaimFilter{Machine: "m2", Limit: 1})), []string{"a"})
	c.create("t1", c.newTask("t1", "b", T0))
	c.heartbeat(app.Agent{AgentID: "a1", MachineID: "m1", LastHeartbeatAt: T0.Add(20 * time.Second), LostAfter: T0.Add(35 * time.Second)})
	c.wantIDs("its claim once heard from again", ids(c.claim("a1", "r1", app.ClaimFilter{Machine: "m1"})), []string{"b"})
}

func (c *contract) claimLeaseDecides(t *testing.T) {
	c.create("t1", c.newTask("t1", "a", T0), c.newTask("t1", "b", T0.Add(time.Second)))
	f := app.ClaimFilter{Tenant: "*", Machine: "m1", Limit: 5, Now: T0.Add(time.Minute)}
	boom := errors.New("boom")
	_, err := c.s.Tasks.Claim(c.ctx, "a1", "r1", f, func([]domain.Task) ([][]domain.Record, error) { return nil, boom })
	c.wantErr("lease's error", err, boom)
	if c.get("a").Status != domain.StatusPending {
		t.Error("a failed claim leased a task")
	}
	// Only what lease returns records for is leased and remembered.
	var seen []string
	got, err := c.s.Tasks.Claim(c.ctx, "a1", "r1", f, func(cands []domain.Task) ([][]domain.Record, error) {
		seen = ids(cands)
		out := make([][]domain.Record, len(cands))
		recs, err := cands[1].Lease(f.Now, "att-b", "a1", "m1", "r1")
		out[1] = recs
		return out, err
	})
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("candidates", seen, []string{"a", "b"})
	c.wantIDs("leased", ids(got), []string{"b"})
	c.wantIDs("retried claim", ids(c.claim("a1", "r1", f)), []string{"b"})
	if c.get("a").Status != domain.StatusPending {
		t.Error("a candidate lease skipped was leased")
	}
}

func (c *contract) taskQueries(t *testing.T) {
	now := T0.Add(time.Minute)
	video := domain.SpecInput{Name: "v", Type: domain.TypeVideo, Video: &domain.Video{Model: "m", Type: "text_to_video", Prompt: "p",
		Width: 832, Height: 480, Duration: 5, FrameNum: 81}}
	videoSpec, err := domain.NormalizeSpec(video)
	if err != nil {
		t.Fatal(err)
	}
	c.create("t1",
		c.newTask("t1", "a", T0), c.newTask("t1", "b", T0), c.newTask("t1", "c", T0), c.newTask("t1", "gone", T0),
		domain.Submit(T0.Add(2*time.Second), "v2", "t1", "user", "", "", videoSpec, ""),
		domain.Submit(T0.Add(time.Second), "v1", "t1", "user", "", "", videoSpec, ""),
		domain.Submit(T0.Add(3*time.Second), "v3", "t1", "user", "", "", videoSpec, ""),
		domain.Submit(T0.Add(time.Second), "v-gone", "t1", "user", "", "", videoSpec, ""),
		domain.Submit(T0, "in-queue", "t1", "user", "", "", Spec(t, "in-queue"), "cq1"),
		domain.Submit(T0, "no-queue", "t1", "user", "", "", Spec(t, "no-queue"), ""),
	)
	c.create("t2", c.newTask("t2", "theirs", T0))
	for _, id := range []string{"gone", "v-gone"} {
		c.mutate(id, func(t domain.Task) ([]domain.Record, error) { return t.Delete(T0, "user") })
	}

	missing, err := c.s.Tasks.MissingTasks(c.ctx, "t1", []string{"a", "gone", "theirs", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	c.wantSet("missing", missing, []string{"gone", "theirs", "nope"})
	for _, tc := range []struct {
		tenant string
		want   []string
	}{{"t1", []string{"a", "b"}}, {"*", []string{"a", "b", "theirs"}}} {
		got, err := c.s.Tasks.GetMany(c.ctx, tc.tenant, []string{"a", "b", "gone", "theirs", "nope", "a"})
		if err != nil {
			t.Fatal(err)
		}
		c.wantSet("tasks of "+tc.tenant+" by id", ids(got), tc.want)
	}

	c.lease("a", "ag1", "m1", now)
	c.lease("b", "ag1", "m1", now)
	c.mutate("b", func(t domain.Task) ([]domain.Record, error) { return t.Cancel(now, "user", "") })
	c.lease("c", "ag2", "m2", now)
	// A heartbeat reads what its answer depends on.
	beat := func(agentID string, held ...string) app.HeartbeatReads {
		c.t.Helper()
		r, err := c.s.Agents.Heartbeat(c.ctx, app.Agent{AgentID: agentID, MachineID: "m", LastHeartbeatAt: now, LostAfter: now.Add(time.Minute)}, held)
		if err != nil {
			c.t.Fatalf("heartbeat of %s: %v", agentID, err)
		}
		return r
	}
	r := beat("ag1", "att-a", "att-b", "att-c", "att-x")
	c.wantSet("ag1's tasks by the attempts it runs", ids(r.Held), []string{"a", "b"})
	c.wantSet("ag1's unheld leases while it runs both", r.Unheld, nil)
	r = beat("ag1", "att-b")
	c.wantSet("ag1's tasks by attempt b", ids(r.Held), []string{"b"})
	c.wantSet("ag1's unheld leases while it runs b", r.Unheld, []string{"a"})
	r = beat("ag1")
	c.wantSet("ag1's tasks by no attempt", ids(r.Held), nil)
	c.wantSet("ag1's unheld leases while it runs nothing", r.Unheld, []string{"a"})
	if r.Drained || len(r.Preempted) != 0 {
		t.Errorf("ag1's heartbeat = %+v, want neither drained nor preempted tasks", r)
	}

	c.mutate("in-queue", func(t domain.Task) ([]domain.Record, error) { return t.Admit(now, t.AdmissionEpoch, "cq1", nil), nil })
	for _, id := range []string{"in-queue", "no-queue"} {
		c.lease(id, "ag3", "m3", now)
		c.mutate(id, func(t domain.Task) ([]domain.Record, error) { return t.Preempt(now, "x", "room") })
	}
	if err := c.s.Agents.SetDrained(c.ctx, "ag3", true, now); err != nil {
		t.Fatal(err)
	}
	r = beat("ag3")
	c.wantIDs("preempted with a queue", ids(r.Preempted), []string{"in-queue"})
	c.wantSet("ag3's unheld leases (preempted ones are not leased)", r.Unheld, nil)
	if !r.Drained {
		t.Error("ag3's heartbeat: not drained after its drain")
	}
	r = beat("ag3", "att-in-queue")
	c.wantSet("ag3's preempted task it still runs", ids(r.Held), []string{"in-queue"})

	got, err := c.s.Tasks.VideoTasksCreatedBefore(c.ctx, T0.Add(3*time.Second), 10)
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("video tasks, oldest first", ids(got), []string{"v1", "v2"})
	got, err = c.s.Tasks.VideoTasksCreatedBefore(c.ctx, T0.Add(time.Hour), 2)
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("video tasks, limited", ids(got), []string{"v1", "v2"})
}

func (c *contract) listTasks(t *testing.T) {
	at := func(s int) time.Time { return T0.Add(time.Duration(s) * time.Second) }
	c.create("t1",
		c.newTask("t1", "a", at(1), prio(1), func(in *domain.SpecInput) { in.GroupID = "g1" }),
		c.newTask("t1", "b", at(2), func(in *domain.SpecInput) { in.MachineID = "m1" }),
		c.newTask("t1", "c", at(3), func(in *domain.SpecInput) { in.GroupID = "g1"; in.Type = domain.TypePython }),
		c.newTask("t1", "d", at(4)),
		c.newTask("t1", "e", at(5)),
	)
	c.create("t2", c.newTask("t2", "z", at(6), func(in *domain.SpecInput) { in.Type = domain.TypePython }))
	c.lease("d", "ag", "m1", at(10))
	c.mutate("e", func(t domain.Task) ([]domain.Record, error) { return t.Delete(at(10), "user") })
	if c.s.SyncViews != nil {
		c.s.SyncViews(t)
	}
	list := func(f app.ListFilter) ([]string, string) {
		t.Helper()
		got, next, err := c.s.Views.List(c.ctx, f)
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		return ids(got), next
	}
	for _, tc := range []struct {
		name string
		f    app.ListFilter
		want []string
	}{
		{"tenant, newest first, deleted left out", app.ListFilter{Tenant: "t1"}, []string{"d", "c", "b", "a"}},
		{"every tenant", app.ListFilter{Tenant: "*"}, []string{"z", "d", "c", "b", "a"}},
		{"status", app.ListFilter{Tenant: "t1", Status: "assigned"}, []string{"d"}},
		{"target or assigned machine", app.ListFilter{Tenant: "t1", Machine: "m1"}, []string{"d", "b"}},
		{"group", app.ListFilter{Tenant: "t1", Group: "g1"}, []string{"c", "a"}},
		{"priority", app.ListFilter{Tenant: "t1", Priority: 1}, []string{"a"}},
		{"created in [2s, 4s)", app.ListFilter{Tenant: "t1", CreatedAfter: at(2), CreatedBefore: at(4)}, []string{"c", "b"}},
		{"type", app.ListFilter{Tenant: "t1", Type: "python"}, []string{"c"}},
		{"type and group", app.ListFilter{Tenant: "t1", Type: "shell", Group: "g1"}, []string{"a"}},
		{"type and status", app.ListFilter{Tenant: "t1", Type: "shell", Status: "pending"}, []string{"b", "a"}},
		{"type of every tenant", app.ListFilter{Tenant: "*", Type: "python"}, []string{"z", "c"}},
		{"a type no task has", app.ListFilter{Tenant: "t1", Type: "video"}, nil},
	} {
		got, next := list(tc.f)
		c.wantIDs(tc.name, got, tc.want)
		if next != "" {
			t.Errorf("%s: next page token %q on the last page", tc.name, next)
		}
	}
	// pagesOf follows f's page tokens (at most four pages).
	pagesOf := func(f app.ListFilter) (pages [][]string) {
		for {
			got, next := list(f)
			pages = append(pages, got)
			if next == "" || len(pages) > 3 {
				return pages
			}
			f.PageToken = next
		}
	}
	if pages := pagesOf(app.ListFilter{Tenant: "t1", PageSize: 3}); fmt.Sprint(pages) != "[[d c b] [a]]" {
		t.Errorf("pages = %v", pages)
	}
	// A filter keeps its pages: the token goes on from the last task of
	// the filtered page.
	if pages := pagesOf(app.ListFilter{Tenant: "t1", Type: "shell", PageSize: 2}); fmt.Sprint(pages) != "[[d b] [a]]" {
		t.Errorf("pages of type shell = %v", pages)
	}
	_, _, err := c.s.Views.List(c.ctx, app.ListFilter{Tenant: "t1", PageToken: "not a token"})
	c.wantErr("a page token List did not make", err, app.ErrBadPageToken)
}

// latestHeartbeat is LatestHeartbeat's answer, which must be want.
func (c *contract) latestHeartbeat(what string, want time.Time) {
	c.t.Helper()
	got, err := c.s.Sweeps.LatestHeartbeat(c.ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	if !got.Equal(want) {
		c.t.Errorf("latest heartbeat %s = %v, want %v", what, got, want)
	}
}

func (c *contract) agents(t *testing.T) {
	c.latestHeartbeat("before any agent", time.Time{})
	c.heartbeat(app.Agent{AgentID: "a1", MachineID: "m2", Labels: []string{"gpu", "a100"}, LastHeartbeatAt: T0, LostAfter: T0.Add(10 * time.Second)})
	c.heartbeat(app.Agent{AgentID: "a2", MachineID: "m1", TenantID: "t1", Labels: []string{"gpu"}, LastHeartbeatAt: T0, LostAfter: T0.Add(20 * time.Second)})
	c.heartbeat(app.Agent{AgentID: "a3", MachineID: "m2", LastHeartbeatAt: T0, LostAfter: T0.Add(20 * time.Second)})
	c.heartbeat(app.Agent{AgentID: "a4", MachineID: "m3", TenantID: "t2", Labels: []string{"gpu"}, LastHeartbeatAt: T0, LostAfter: T0.Add(20 * time.Second)})
	// a5 has only claimed, never heartbeated: its silence makes its
	// machine no longer live, but its leases are left to expire.
	if err := c.s.Agents.Seen(c.ctx, app.Agent{AgentID: "a5", MachineID: "m5", TenantID: "t1", LastHeartbeatAt: T0, LostAfter: T0.Add(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	machines := func(tenant string, labels ...string) []string {
		t.Helper()
		got, err := c.s.Agents.Machines(c.ctx, tenant, labels)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	c.wantIDs("t1's machines", machines("t1"), []string{"m1", "m2", "m5"})
	c.wantIDs("t1's gpu machines", machines("t1", "gpu"), []string{"m1", "m2"})
	c.wantIDs("t1's a100 machines", machines("t1", "gpu", "a100"), []string{"m2"})
	c.wantIDs("t2's gpu machines", machines("t2", "gpu"), []string{"m2", "m3"})

	lost, err := c.s.Sweeps.LostAgents(c.ctx, T0.Add(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("lost at 15s (a5 never heartbeated)", lost, []string{"a1"})
	c.wantIDs("t1's machines with a1 and a5 silent", machines("t1"), []string{"m1", "m2"})
	lost, err = c.s.Sweeps.LostAgents(c.ctx, T0.Add(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("lost again", lost, nil)
	c.wantIDs("t1's a100 machines once a1 is lost", machines("t1", "gpu", "a100"), nil)
	c.heartbeat(app.Agent{AgentID: "a1", MachineID: "m2", Labels: []string{"gpu", "a100"}, LastHeartbeatAt: T0.Add(16 * time.Second), LostAfter: T0.Add(30 * time.Second)})
	c.wantIDs("a1 back", machines("t1", "gpu", "a100"), []string{"m2"})
	c.latestHeartbeat("after a1's", T0.Add(16*time.Second))
	// A claim is a sign of an agent too.
	if err := c.s.Agents.Seen(c.ctx, app.Agent{AgentID: "a5", MachineID: "m5", TenantID: "t1", LastHeartbeatAt: T0.Add(17 * time.Second), LostAfter: T0.Add(30 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	c.latestHeartbeat("after a5's claim", T0.Add(17*time.Second))
}

func (c *contract) fleet(t *testing.T) {
	fleet := func(ids ...string) []app.FleetAgent {
		t.Helper()
		got, err := c.s.Agents.Fleet(c.ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	drained := func(id string) bool {
		t.Helper()
		d, err := c.s.Agents.Drained(c.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if got := fleet(); len(got) != 0 {
		t.Fatalf("fleet of a new store = %v", got)
	}
	c.heartbeat(app.Agent{AgentID: "a1", MachineID: "m1", TenantID: "t1", IP: "10.0.0.1", Labels: []string{"gpu"}, FreeSlots: 3,
		Slots: 4, Version: "v1.2", Isolation: "cgroup-v1", Warnings: []string{"no sandbox"}, LastHeartbeatAt: T0, LostAfter: T0.Add(time.Minute)})
	// A claim proves a1 alive later without describing it.
	if err := c.s.Agents.Seen(c.ctx, app.Agent{AgentID: "a1", MachineID: "m1", TenantID: "t1", IP: "10.0.0.2", Labels: []string{"gpu"},
		LastHeartbeatAt: T0.Add(5 * time.Second), LostAfter: T0.Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	c.create("t1", c.newTask("t1", "held", T0), c.newTask("t1", "free", T0))
	c.lease("held", "a1", "m1", T0)
	if err := c.s.Agents.SetDrained(c.ctx, "ghost", true, T0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got := fleet()
	if len(got) != 2 || got[0].AgentID != "a1" || got[1].AgentID != "ghost" {
		t.Fatalf("fleet = %+v, want a1 and ghost (drained, never seen), by id", got)
	}
	a1 := got[0]
	if !a1.Seen || a1.Slots != 4 || a1.Version != "v1.2" || a1.Isolation != "cgroup-v1" || !slices.Equal(a1.Warnings, []string{"no sandbox"}) ||
		a1.IP != "10.0.0.2" || !a1.LastHeartbeatAt.Equal(T0.Add(5*time.Second)) || !a1.FirstSeenAt.Equal(T0) || a1.Lost || a1.Drained ||
		!slices.Equal(a1.RunningTaskIDs, []string{"held"}) || a1.FreeSlots != 0 || a1.TenantID != "t1" {
		t.Errorf("a1 = %+v", a1)
	}
	if g := got[1]; g.Seen || !g.Drained || !g.DrainedAt.Equal(T0.Add(time.Second)) || len(g.RunningTaskIDs) != 0 {
		t.Errorf("ghost = %+v", g)
	}
	// Draining again keeps the first time; undraining forgets it.
	for _, at := range []time.Time{T0.Add(2 * time.Second), T0.Add(3 * time.Second)} {
		if err := c.s.Agents.SetDrained(c.ctx, "a1", true, at); err != nil {
			t.Fatal(err)
		}
	}
	if f := fleet("a1"); len(f) != 1 || !f[0].Drained || !f[0].DrainedAt.Equal(T0.Add(2*time.Second)) || !drained("a1") {
		t.Errorf("a1 drained twice = %+v", f)
	}
	if err := c.s.Agents.SetDrained(c.ctx, "a1", false, T0.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if drained("a1") || drained("nobody") || !drained("ghost") {
		t.Error("drained after undrain: a1 or an unknown agent is drained, or ghost is not")
	}
	if f := fleet("a1", "nobody"); len(f) != 1 || f[0].Drained {
		t.Errorf("fleet(a1, nobody) = %+v", f)
	}
}

func (c *contract) sweepLeases(t *testing.T) {
	ttl := func(s int) opts { return func(in *domain.SpecInput) { in.LeaseTTL, in.RenewInterval = &s, intp(1) } }
	timeout := func(s int) opts { return func(in *domain.SpecInput) { in.Timeout, in.GracePeriod = &s, intp(5) } }
	c.create("t1",
		c.newTask("t1", "short", T0, ttl(10)), c.newTask("t1", "shorter", T0, ttl(5)), c.newTask("t1", "long", T0, ttl(100)),
		c.newTask("t1", "other-agent", T0, ttl(5)), c.newTask("t1", "pending", T0),
		c.newTask("t1", "slow", T0, timeout(20)), c.newTask("t1", "slower", T0, timeout(10)), c.newTask("t1", "fast", T0, timeout(100)),
	)
	for _, id := range []string{"short", "shorter", "long", "slow", "slower", "fast"} {
		c.lease(id, "ag1", "m1", T0)
	}
	c.lease("other-agent", "ag2", "m2", T0)
	for _, id := range []string{"slow", "slower", "fast"} {
		c.start(id, T0)
		c.mutate(id, func(t domain.Task) ([]domain.Record, error) { return t.Renew(T0, t.AgentID, t.AttemptID, 3600) })
	}
	leases, err := c.s.Sweeps.LeasesOf(c.ctx, "ag1")
	if err != nil {
		t.Fatal(err)
	}
	c.wantSet("ag1's leases", leases, []string{"short", "shorter", "long", "slow", "slower", "fast"})

	expired, err := c.s.Sweeps.ExpiredLeases(c.ctx, T0.Add(11*time.Second), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(expired) != 3 || !slices.Equal(expired[2:], []string{"short"}) {
		t.Errorf("expired at 11s = %v, want shorter and other-agent (either order), then short", expired)
	}
	c.wantSet("expired at 11s", expired, []string{"shorter", "other-agent", "short"})
	if expired, err = c.s.Sweeps.ExpiredLeases(c.ctx, T0.Add(11*time.Second), 2); err != nil || len(expired) != 2 || slices.Contains(expired, "short") {
		t.Errorf("expired at 11s, at most 2 = %v, %v", expired, err)
	}

	// timeout + grace (5 s) + slack (10 s): slower at 25 s, slow at 35 s.
	overdue, err := c.s.Sweeps.Overdue(c.ctx, T0.Add(36*time.Second), 10*time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("overdue at 36s", overdue, []string{"slower", "slow"})
	overdue, err = c.s.Sweeps.Overdue(c.ctx, T0.Add(30*time.Second), 10*time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	c.wantIDs("overdue at 30s", overdue, []string{"slower"})
}

func (c *contract) sweepPreempted(t *testing.T) {
	now := T0.Add(time.Minute)
	grace := func(s int) opts { return func(in *domain.SpecInput) { in.GracePeriod = &s } }
	c.create("t1",
		c.newTask("t1", "by-done", T0), c.newTask("t1", "by-running", T0), c.newTask("t1", "by-gone", T0),
		c.newTask("t1", "by-deleted", T0), c.newTask("t1", "by-running-long", T0),
		c.newTask("t1", "done", T0), c.newTask("t1", "running", T0), c.newTask("t1", "deleted", T0),
	)
	c.lease("done", "ag9", "m9", T0)
	c.finish("done", T0, 0)
	c.lease("running", "ag9", "m9", T0)
	c.mutate("deleted", func(t domain.Task) ([]domain.Record, error) { return t.Delete(T0, "user") })
	for id, by := range map[string]string{"by-done": "done", "by-running": "running", "by-gone": "nope", "by-deleted": "deleted"} {
		c.lease(id, "ag1", "m1", now)
		c.mutate(id, func(t domain.Task) ([]domain.Record, error) { return t.Preempt(now, by, "room") })
	}
	c.lease("by-running-long", "ag1", "m1", T0)
	c.mutate("by-running-long", func(t domain.Task) ([]domain.Record, error) { return t.Preempt(T0, "running", "room") })

	got, err := c.s.Sweeps.ReleasablePreempted(c.ctx, now, 30*time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	c.wantSet("releasable", got, []string{"by-done", "by-gone", "by-deleted", "by-running-long"})

	// Evictions for quota (tasks with a ClusterQueue) are stranded when no
	// heartbeat will confirm the stop.
	c.heartbeat(app.Agent{AgentID: "alive", MachineID: "m1", LastHeartbeatAt: now, LostAfter: now.Add(time.Hour)})
	c.heartbeat(app.Agent{AgentID: "lost", MachineID: "m2", LastHeartbeatAt: T0, LostAfter: T0})
	if _, err := c.s.Sweeps.LostAgents(c.ctx, now); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, agent string
		at        time.Time
		grace     int
	}{
		{"q-alive", "alive", now, 30}, {"q-lost", "lost", now, 30}, {"q-unknown", "nobody", now, 30},
		{"q-stale", "alive", T0, 10}, {"q-recent", "alive", now.Add(-20 * time.Second), 30},
	} {
		c.create("t1", domain.Submit(T0, tc.id, "t1", "user", "", "", Spec(t, tc.id, grace(tc.grace)), "cq1"))
		c.mutate(tc.id, func(t domain.Task) ([]domain.Record, error) { return t.Admit(T0, t.AdmissionEpoch, "cq1", nil), nil })
		c.lease(tc.id, tc.agent, "m1", T0)
		c.mutate(tc.id, func(t domain.Task) ([]domain.Record, error) {
			return t.Evict(tc.at, t.AdmissionEpoch, "x", "quota"), nil
		})
	}
	// slack 15 s: q-stale's grace (10 s) ended 50 s before now; q-recent's
	// (30 s) ends 10 s after now.
	got, err = c.s.Sweeps.StrandedEvictions(c.ctx, now, 15*time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	c.wantSet("stranded", got, []string{"q-lost", "q-unknown", "q-stale"})
	got, err = c.s.Sweeps.ReleasablePreempted(c.ctx, now, 30*time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	c.wantSet("releasable (evictions are not)", got, []string{"by-done", "by-gone", "by-deleted", "by-running-long"})
}

func (c *contract) sweepBlocked(t *testing.T) {
	dep := func(d string) opts { return func(in *domain.SpecInput) { in.DependsOn = []string{d} } }
	c.create("t1",
		c.newTask("t1", "failed", T0), c.newTask("t1", "cancelled", T0), c.newTask("t1", "deleted", T0),
		c.newTask("t1", "completed", T0), c.newTask("t1", "pending", T0),
		c.newTask("t1", "on-failed", T0, dep("failed")), c.newTask("t1", "on-cancelled", T0, dep("cancelled")),
		c.newTask("t1", "on-deleted", T0, dep("deleted")), c.newTask("t1", "on-completed", T0, dep("completed")),
		c.newTask("t1", "on-pending", T0, dep("pending")), c.newTask("t1", "done-on-failed", T0, dep("failed")),
	)
	noRetry := func(t domain.Task) ([]domain.Record, error) {
		recs, _, err := t.Complete(T0, t.AgentID, t.AttemptID, domain.Outcome{ExitCode: 1})
		if err != nil {
			return nil, err
		}
		return recs[:1], nil // the failure without its retry
	}
	c.lease("failed", "ag", "m", T0)
	c.mutate("failed", noRetry)
	c.mutate("cancelled", func(t domain.Task) ([]domain.Record, error) { return t.Cancel(T0, "user", "") })
	c.mutate("deleted", func(t domain.Task) ([]domain.Record, error) { return t.Delete(T0, "user") })
	c.lease("completed", "ag", "m", T0)
	c.finish("completed", T0, 0)
	c.mutate("done-on-failed", func(t domain.Task) ([]domain.Record, error) { return t.Cancel(T0, "user", "") })

	got, err := c.s.Sweeps.BlockedByFailure(c.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"on-failed": "failed", "on-cancelled": "cancelled", "on-deleted": "deleted"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("blocked = %v, want %v", got, want)
	}
	if got, err = c.s.Sweeps.BlockedByFailure(c.ctx, 2); err != nil || len(got) != 2 {
		t.Errorf("blocked, at most 2 = %v, %v", got, err)
	}
}

// releasableHeld: tasks held out of their ClusterQueue for dependencies
// are listed once every dependency completed, oldest first, until
// released or no longer pending.
func (c *contract) releasableHeld(t *testing.T) {
	held := func(id string, at time.Time, deps ...string) []domain.Record {
		return domain.Submit(at, id, "t1", "user", "", "", Spec(t, id, func(in *domain.SpecInput) { in.DependsOn = deps }), "cq1")
	}
	c.create("t1", c.newTask("t1", "parent", T0), c.newTask("t1", "other", T0), c.newTask("t1", "done", T0))
	c.lease("done", "ag", "m", T0)
	c.finish("done", T0, 0)
	c.create("t1",
		held("held-on-parent", T0.Add(2*time.Second), "parent"),
		held("held-on-done", T0.Add(3*time.Second), "done"),
		held("held-on-two", T0.Add(time.Second), "parent", "other"),
		held("held-cancelled", T0, "done"),
		c.newTask("t1", "plain-child", T0, func(in *domain.SpecInput) { in.DependsOn = []string{"done"} }),
	)
	c.mutate("held-cancelled", func(t domain.Task) ([]domain.Record, error) { return t.Cancel(T0, "user", "") })
	list := func(limit int) []string {
		t.Helper()
		ids, err := c.s.Sweeps.ReleasableHeld(c.ctx, limit)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	c.wantIDs("releasable before the parent completed", list(10), []string{"held-on-done"})
	if held, err := c.s.Sweeps.AnyHeld(c.ctx); err != nil || !held {
		t.Errorf("AnyHeld = %v, %v; want true", held, err)
	}
	c.lease("parent", "ag", "m", T0)
	c.finish("parent", T0, 0)
	c.wantIDs("releasable after it completed", list(10), []string{"held-on-parent", "held-on-done"})
	c.wantIDs("releasable, at most 1", list(1), []string{"held-on-parent"})
	released := c.mutate("held-on-parent", func(t domain.Task) ([]domain.Record, error) { return t.ReleaseForAdmission(T0), nil })
	if released.HeldForDependencies || !released.AwaitingAdmission() {
		t.Errorf("released = %+v", released)
	}
	c.wantIDs("releasable after one release", list(10), []string{"held-on-done"})
	for _, id := range []string{"held-on-done", "held-on-two"} {
		c.mutate(id, func(t domain.Task) ([]domain.Record, error) { return t.Cancel(T0, "user", "") })
	}
	if held, err := c.s.Sweeps.AnyHeld(c.ctx); err != nil || held {
		t.Errorf("AnyHeld with every held task released or cancelled = %v, %v; want false", held, err)
	}
}

func (c *contract) preemptionCandidates(t *testing.T) {
	now := T0.Add(time.Minute)
	waited := now.Add(-2 * time.Second)
	c.heartbeat(app.Agent{AgentID: "busy", MachineID: "m1", Labels: []string{"gpu"}, LastHeartbeatAt: now, LostAfter: now.Add(time.Hour)})
	c.heartbeat(app.Agent{AgentID: "busy-t2", MachineID: "m2", TenantID: "t2", LastHeartbeatAt: now, LostAfter: now.Add(time.Hour)})
	c.create("t1",
		c.newTask("t1", "low-started-early", T0, prio(9)),
		c.newTask("t1", "low-started-late", T0, prio(9)),
		c.newTask("t1", "mid", T0, prio(6)),
		c.newTask("t1", "urgent", T0.Add(time.Second), prio(1)),
		c.newTask("t1", "urgent-later", T0.Add(2*time.Second), prio(2)),
		c.newTask("t1", "close", T0, prio(7)),                    // gap 2 to the lowest running: not enough
		c.newTask("t1", "fresh", now.Add(-time.Second), prio(1)), // has not waited long enough
		c.newTask("t1", "elsewhere", T0, prio(1), func(in *domain.SpecInput) { in.MachineID = "m9" }),
		// Waits for mid: a slot freed for it could not be used.
		c.newTask("t1", "after-mid", T0, prio(1), func(in *domain.SpecInput) { in.DependsOn = []string{"mid"} }),
		// Admitted in a ClusterQueue: the lowest priority and the latest
		// start, but only the quota service preempts it.
		domain.Submit(T0, "in-queue", "t1", "user", "", "", Spec(t, "in-queue", prio(10)), "cq1"),
	)
	c.mutate("in-queue", func(t domain.Task) ([]domain.Record, error) { return t.Admit(T0, t.AdmissionEpoch, "cq1", nil), nil })
	c.lease("in-queue", "busy", "m1", T0)
	c.start("in-queue", T0.Add(time.Second))
	// Started 100 ms and 120 ms after T0: written as text, ".1Z" sorts
	// after ".12Z", so only a comparison of times gets "most recent" right.
	for id, started := range map[string]time.Duration{"low-started-early": 100 * time.Millisecond, "low-started-late": 120 * time.Millisecond} {
		c.lease(id, "busy", "m1", T0)
		c.start(id, T0.Add(started))
	}
	c.lease("mid", "busy", "m1", T0)
	got, err := c.s.Sweeps.PreemptionCandidates(c.ctx, waited, 3, 20)
	if err != nil {
		t.Fatal(err)
	}
	want := []app.Preemption{{Preemptor: "urgent", Priority: 1, Victim: "low-started-late"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("candidates = %+v, want %+v (urgent-later wants the same victim and waits)", got, want)
	}
	// Once a victim is preempted for it, a task asks for nothing more; the
	// next one takes the next victim.
	c.mutate("low-started-late", func(t domain.Task) ([]domain.Record, error) { return t.Preempt(now, "urgent", "room") })
	got, err = c.s.Sweeps.PreemptionCandidates(c.ctx, waited, 3, 20)
	if err != nil {
		t.Fatal(err)
	}
	want = []app.Preemption{{Preemptor: "urgent-later", Priority: 2, Victim: "low-started-early"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("candidates after the first preemption = %+v, want %+v", got, want)
	}
	// An agent with a free slot that could take the waiting work: no
	// preemption.
	c.heartbeat(app.Agent{AgentID: "idle", MachineID: "m3", FreeSlots: 1, LastHeartbeatAt: now, LostAfter: now.Add(time.Hour)})
	if got, err = c.s.Sweeps.PreemptionCandidates(c.ctx, waited, 3, 20); err != nil || len(got) != 0 {
		t.Errorf("candidates with a free slot = %+v, %v", got, err)
	}
}

func (c *contract) pruneClaims(t *testing.T) {
	c.create("t1", c.newTask("t1", "a", T0))
	first := c.claim("a1", "r1", app.ClaimFilter{Machine: "m1", Now: T0.Add(time.Second)})
	c.wantIDs("claim", ids(first), []string{"a"})
	if err := c.s.Sweeps.PruneClaims(c.ctx, T0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	again := c.claim("a1", "r1", app.ClaimFilter{Machine: "m1", Now: T0.Add(2 * time.Second)})
	if len(again) != 1 || again[0].AttemptID != first[0].AttemptID || again[0].Version != first[0].Version {
		t.Errorf("a claim not older than the cutoff was forgotten: %+v", again)
	}
	c.mutate("a", func(t domain.Task) ([]domain.Record, error) {
		return t.ExpireLease(T0.Add(2*time.Second), domain.ReasonLeaseExpired)
	})
	if err := c.s.Sweeps.PruneClaims(c.ctx, T0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	again = c.claim("a1", "r1", app.ClaimFilter{Machine: "m1", Now: T0.Add(3 * time.Second)})
	// Leased, expired, leased again.
	if len(again) != 1 || again[0].Version != first[0].Version+2 || again[0].Status != domain.StatusAssigned {
		t.Errorf("a pruned claim's retry = %+v, want a new lease", again)
	}
}

func (c *contract) sweeperLock(t *testing.T) {
	held, ok, err := c.s.Sweeper.TryLock(c.ctx)
	if err != nil || !ok || held == nil {
		t.Fatalf("TryLock = %v, %v, %v", held, ok, err)
	}
	if err := held.Alive(c.ctx); err != nil {
		t.Errorf("Alive = %v", err)
	}
	other, ok, err := c.s.Sweeper.TryLock(c.ctx)
	if err != nil || ok || other != nil {
		t.Errorf("a second TryLock = %v, %v, %v; want not ok", other, ok, err)
	}
	held.Release()
	held, ok, err = c.s.Sweeper.TryLock(c.ctx)
	if err != nil || !ok {
		t.Fatalf("TryLock after Release = %v, %v", ok, err)
	}
	held.Release()
}
