package app_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestClaimIsIdempotentByAgentAndRequestID(t *testing.T) {
	h := newHarness(t)
	a := h.create(user("t1"), spec("a"))
	req := app.ClaimRequest{AgentID: "a1", MachineID: "m1", RequestID: "r1", Limit: 5}
	first, reqID, err := h.app.ClaimTasks(h.ctx, agent("a1"), req)
	if err != nil {
		t.Fatal(err)
	}
	if reqID != "r1" || len(first) != 1 || first[0].ID != a.ID || first[0].Status != domain.StatusAssigned ||
		first[0].AgentID != "a1" || first[0].AssignedMachine != "m1" || first[0].ClaimRequestID != "r1" || first[0].AttemptID == "" {
		t.Fatalf("claim = %q %+v", reqID, first)
	}
	b := h.create(user("t1"), spec("b"))
	again, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != a.ID || again[0].AttemptID != first[0].AttemptID {
		t.Errorf("the same claim again = %+v, want the first answer", again)
	}
	if names := h.eventNames(a.ID); names != "[TaskSubmitted TaskLeased]" {
		t.Errorf("events of a = %s: a repeated claim leased again", names)
	}
	h.wantStatus(b.ID, domain.StatusPending)
	other, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", RequestID: "r2"})
	if err != nil || len(other) != 1 || other[0].ID != b.ID {
		t.Errorf("a new request id = %v, %v; want b", taskIDs(other), err)
	}
}

func TestClaimMakesARequestIDWhenTheAgentSendsNone(t *testing.T) {
	h := newHarness(t)
	h.create(user("t1"), spec("a"))
	got, reqID, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1"})
	if err != nil || reqID == "" || len(got) != 1 || got[0].ClaimRequestID != reqID {
		t.Errorf("claim = %v, %q, %v", taskIDs(got), reqID, err)
	}
}

func TestClaimHonoursTargetsLabelsAndTenants(t *testing.T) {
	h := newHarness(t)
	onM2 := h.create(user("t1"), spec("on-m2", func(in *domain.SpecInput) { in.MachineID = "m2" }))
	gpu := h.create(user("t1"), spec("gpu", func(in *domain.SpecInput) { in.Labels = []string{"gpu"} }))
	theirs := h.create(user("t2"), spec("theirs"))
	h.clock.Advance(time.Second)
	plain := h.create(user("t1"), spec("plain"))

	tenantAgent := app.Caller{Tenant: "t1", Subject: "agent:a1", AgentID: "a1", IP: "10.0.1.1"}
	got, _, err := h.app.ClaimTasks(h.ctx, tenantAgent, app.ClaimRequest{AgentID: "a1", MachineID: "m1", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(taskIDs(got), []string{plain.ID}) {
		t.Errorf("t1's agent on m1 without labels got %v, want only the plain task", taskIDs(got))
	}
	got = h.claim("a2", "m2", 10, "gpu")
	if want := []string{onM2.ID, gpu.ID, theirs.ID}; !sameSet(taskIDs(got), want) {
		t.Errorf("a shared gpu agent on m2 got %v, want %v", taskIDs(got), want)
	}
}

func TestClaimTakesOneScatterTaskPerMachine(t *testing.T) {
	h := newHarness(t)
	ts, err := h.app.CreateTasks(h.ctx, user("t1"), spec("s", func(in *domain.SpecInput) { in.Mode, in.ScatterCount = domain.ModeScatter, 3 }), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := h.claim("a1", "m1", 10); len(got) != 1 {
		t.Errorf("m1 got %d scatter tasks at once, want 1", len(got))
	}
	if got := h.claim("a1", "m1", 10); len(got) != 0 {
		t.Errorf("m1 got a second sibling: %v", taskIDs(got))
	}
	if got := h.claim("a2", "m2", 10); len(got) != 1 {
		t.Errorf("m2 got %d", len(got))
	}
	n := 0
	for _, x := range ts {
		if h.get(x.ID).Status == domain.StatusAssigned {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d of 3 scatter tasks assigned, want 2", n)
	}
}

func TestClaimAsAnotherAgentIsForbidden(t *testing.T) {
	h := newHarness(t)
	h.create(user("t1"), spec("a"))
	_, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a2", MachineID: "m1"})
	wantErr(t, "claim as a2 with a1's token", err, app.ErrForbidden)
	if calls := h.store.CallsOf("Claim"); len(calls) != 0 {
		t.Errorf("a forbidden claim reached the store: %v", calls)
	}
}

// A claim, with work or without, proves its agent alive: an agent that
// only polls with claims keeps its machine live, with the slots it asked
// to fill and did not.
func TestClaimCountsAsAHeartbeat(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 20 * time.Second })
	h.claim("a1", "m1", 3)
	a, lost, known := h.store.AgentOf("a1")
	if !known || lost || a.MachineID != "m1" || a.FreeSlots != 3 || !a.LostAfter.Equal(h.clock.Now().Add(20*time.Second)) {
		t.Errorf("agent after an empty claim = %+v (lost %v, known %v)", a, lost, known)
	}
	h.clock.Advance(5 * time.Second)
	h.create(user("t1"), spec("a"))
	h.claim("a1", "m1", 3, "gpu")
	a, lost, known = h.store.AgentOf("a1")
	if !known || lost || a.MachineID != "m1" || a.TenantID != "" || a.IP != "10.0.1.1" || !slices.Equal(a.Labels, []string{"gpu"}) ||
		a.FreeSlots != 2 || !a.LostAfter.Equal(h.clock.Now().Add(20*time.Second)) {
		t.Errorf("agent after a claim = %+v (lost %v, known %v)", a, lost, known)
	}
}

func TestClaimWaitsForWork(t *testing.T) {
	h := newHarness(t)
	done := make(chan []domain.Task, 1)
	go func() {
		ts, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- ts
	}()
	// Once the claim has looked and found nothing, submit.
	for len(h.store.CallsOf("Claim")) == 0 {
		time.Sleep(time.Millisecond)
	}
	x := h.create(user("t1"), spec("a"))
	select {
	case got := <-done:
		if len(got) != 1 || got[0].ID != x.ID {
			t.Errorf("waiting claim got %v", taskIDs(got))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting claim was not woken by new work")
	}
}

func TestANewTaskWakesOneWaitingClaim(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.ClaimRecheck = time.Hour })
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	type answer struct {
		agent string
		tasks []domain.Task
	}
	answers := make(chan answer, 3)
	for i, id := range []string{"a1", "a2", "a3"} {
		go func() {
			ts, _, err := h.app.ClaimTasks(ctx, agent(id), app.ClaimRequest{AgentID: id, MachineID: "m-" + id, Wait: time.Hour})
			if err != nil {
				t.Error(err)
			}
			answers <- answer{id, ts}
		}()
		// One at a time, so that a1 is the claim waiting longest.
		for len(h.store.CallsOf("Claim")) <= i {
			time.Sleep(time.Millisecond)
		}
	}
	x := h.create(user("t1"), spec("a"))
	select {
	case got := <-answers:
		if got.agent != "a1" || len(got.tasks) != 1 || got.tasks[0].ID != x.ID {
			t.Errorf("claim of %s got %v, want a1 with %s", got.agent, taskIDs(got.tasks), x.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no waiting claim was woken by a new task")
	}
	// The other two were not woken: no claim beyond the three first looks
	// and a1's.
	time.Sleep(200 * time.Millisecond)
	if calls := h.store.CallsOf("Claim"); len(calls) != 4 {
		t.Errorf("%d claims ran, want 4 (three looks and the one woken): %v", len(calls), calls)
	}
}

func TestClaimStopsWaitingWhenTheCallerGivesUp(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() {
		ts, _, err := h.app.ClaimTasks(ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", Wait: time.Minute})
		if len(ts) != 0 {
			t.Errorf("got %v", taskIDs(ts))
		}
		done <- err
	}()
	for len(h.store.CallsOf("Claim")) == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("a claim given up = %v, want an empty answer", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the claim kept waiting after its caller gave up")
	}
}

func TestClaimPassesTheStoresFailureOn(t *testing.T) {
	h := newHarness(t)
	h.store.FailOn("Claim", app.ErrStopping)
	_, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1"})
	wantErr(t, "store stopping", err, app.ErrStopping)
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// earlyCandidate hands one candidate to the lease as the domain would see
// a task submitted within the database's microsecond of the claim's
// clock: matched by retry_at <= now, not yet claimable to the nanosecond.
type earlyCandidate struct {
	app.TaskStore
	id string
	at time.Time
}

func (s earlyCandidate) Claim(ctx context.Context, agentID, requestID string, f app.ClaimFilter,
	lease func([]domain.Task) ([][]domain.Record, error)) ([]domain.Task, error) {
	return s.TaskStore.Claim(ctx, agentID, requestID, f, func(c []domain.Task) ([][]domain.Record, error) {
		for i := range c {
			if c[i].ID == s.id {
				c[i].RetryAt = s.at
			}
		}
		return lease(c)
	})
}

// A candidate that is not yet claimable is left for a later claim; the
// claim leases the others and does not fail.
func TestClaimLeavesACandidateNotYetClaimable(t *testing.T) {
	h := newHarness(t)
	ready := h.create(user("acme"), spec("ready"))
	early := h.create(user("acme"), spec("early"))
	stores := h.store.Stores()
	stores.Tasks = earlyCandidate{TaskStore: stores.Tasks, id: early.ID, at: h.clock.Now().Add(time.Nanosecond)}
	a := app.New(stores, h.objects, h.clock.Now, h.hub, app.Config{}, nil)
	got, _, err := a.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", Limit: 10})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(got) != 1 || got[0].ID != ready.ID {
		t.Fatalf("claimed %v, want only %s", got, ready.ID)
	}
	if left, err := h.app.GetTask(h.ctx, user("acme"), early.ID); err != nil || left.Status != domain.StatusPending {
		t.Fatalf("the early task is %v (%v), want pending", left.Status, err)
	}
}

// A claim's retry answers only the tasks the claim still holds. Here its
// answer was lost with the connection, the agent fell silent and was
// found lost, and its task went to another agent: answered again, it
// would run twice.
func TestClaimRetryAnswersOnlyTasksTheClaimStillHolds(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second })
	x := h.create(user("t1"), spec("x"))
	h.heartbeat("a1")
	lostAnswer := app.ClaimRequest{AgentID: "a1", MachineID: "m1", RequestID: "r1", Limit: 1}
	if got, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), lostAnswer); err != nil || len(got) != 1 {
		t.Fatalf("first claim = %v, %v", taskIDs(got), err)
	}
	h.clock.Advance(16 * time.Second)
	if rep := h.sweep(); rep.LeasesExpired != 1 {
		t.Fatalf("sweep = %+v, want a1's lease released", rep)
	}
	moved := h.claimOne("a2", "m2", x.ID)

	again, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), lostAnswer)
	if err != nil || len(again) != 0 {
		t.Fatalf("the claim's retry = %v, %v; want nothing: %s is a2's now (attempt %s)", taskIDs(again), err, x.ID, moved.AttemptID)
	}
	if got := h.get(x.ID); got.AgentID != "a2" || got.AttemptID != moved.AttemptID {
		t.Errorf("after the retry: agent %s attempt %s, want a2's %s", got.AgentID, got.AttemptID, moved.AttemptID)
	}
}

// A claim that was waiting when its agent was found lost leases nothing:
// the sweeper has just released the agent's tasks, and a long poll sent
// before the agent fell silent would take them back to an agent that
// may not hear the answer. The agent's next sign of life lifts it.
func TestWaitingClaimOfALostAgentTakesNothing(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second })
	h.heartbeat("a1")
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan []domain.Task, 1)
	go func() {
		ts, _, _ := h.app.ClaimTasks(ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", Wait: time.Hour})
		done <- ts
	}()
	for len(h.store.CallsOf("Claim")) == 0 {
		time.Sleep(time.Millisecond)
	}
	h.clock.Advance(16 * time.Second)
	if rep := h.sweep(); rep.AgentsLost != 1 {
		t.Fatalf("sweep = %+v, want a1 lost", rep)
	}
	x := h.create(user("t1"), spec("x"))
	time.Sleep(50 * time.Millisecond) // the waiting claim looks again
	h.wantStatus(x.ID, domain.StatusPending)

	got := h.claimOne("a2", "m2", x.ID)
	if got.AgentID != "a2" {
		t.Fatalf("x went to %s, want a2", got.AgentID)
	}
	cancel()
	if ts := <-done; len(ts) != 0 {
		t.Errorf("the lost agent's waiting claim got %v", taskIDs(ts))
	}
}
