package app_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
)

func setup() (*app.App, *apptest.Store, *clocktest.Fixed) {
	st, c := apptest.NewStore(), clocktest.NewFixed(apptest.T0)
	return app.New(st, c.Now, app.Config{AgentLostAfter: 15 * time.Second}, nil), st, c
}

var (
	userA  = app.Caller{Tenant: "t1", Subject: "key-t1"}
	userB  = app.Caller{Tenant: "t2", Subject: "key-t2"}
	agent1 = app.Caller{Tenant: "*", Subject: "agent:a1", AgentID: "a1"}
)

func TestSyncReportsAndReturnsTheAgentsServices(t *testing.T) {
	a, st, c := setup()
	ctx := context.Background()
	mine, err := a.Create(ctx, userA, domain.Spec{Name: "hb", Command: "sleep", AgentID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	labelled, _ := a.Create(ctx, userB, domain.Spec{Name: "exporter", Command: "sleep", Labels: []string{"gpu"}})
	elsewhere, _ := a.Create(ctx, userA, domain.Spec{Name: "other", Command: "sleep", AgentID: "a2"})
	if _, err := a.Create(ctx, userA, domain.Spec{Name: "bad", Command: "sleep"}); !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("create without a target: %v", err)
	}

	got, err := a.Sync(ctx, agent1, "a1", []string{"gpu"}, nil)
	if err != nil || len(got) != 2 || got[0].ID != labelled.ID || got[1].ID != mine.ID {
		t.Fatalf("sync = %+v, %v (want %s, %s, not %s)", got, err, labelled.ID, mine.ID, elsewhere.ID)
	}
	if _, err := a.Sync(ctx, agent1, "a2", nil, nil); !errors.Is(err, app.ErrForbidden) {
		t.Fatalf("sync as another agent: %v", err)
	}
	// The same report twice records one event; its time is the heartbeat.
	rep := app.Report{ServiceID: mine.ID, Instance: domain.Instance{State: domain.StateRunning, PID: 7, Version: "1"}}
	for range 2 {
		c.Advance(time.Second)
		if _, err := a.Sync(ctx, agent1, "a1", []string{"gpu"}, []app.Report{rep}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(st.Events(mine.ID)); n != 2 {
		t.Fatalf("%d events, want created + one report", n)
	}
	sv, _ := a.Get(ctx, userA, mine.ID)
	if in := sv.Instances["a1"]; in.PID != 7 || !in.At.Equal(c.Now()) {
		t.Fatalf("instance = %+v", in)
	}
	// A report of a service pinned to another agent is ignored.
	stray := app.Report{ServiceID: elsewhere.ID, Instance: domain.Instance{State: domain.StateStopped, Version: "1"}}
	if _, err := a.Sync(ctx, agent1, "a1", []string{"gpu"}, []app.Report{stray}); err != nil {
		t.Fatal(err)
	}
	if n := len(st.Events(elsewhere.ID)); n != 1 {
		t.Fatalf("%d events of a service a1 does not run, want its creation only", n)
	}
	// Another tenant cannot read it; a report of a deleted service is
	// ignored.
	if _, err := a.Get(ctx, userB, mine.ID); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("another tenant's get: %v", err)
	}
	if err := a.Delete(ctx, userA, mine.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Sync(ctx, agent1, "a1", []string{"gpu"}, []app.Report{rep}); err != nil || len(got) != 1 {
		t.Fatalf("sync after the delete = %+v, %v", got, err)
	}
}

func TestSilentAgentsServicesBecomeUnknown(t *testing.T) {
	a, _, c := setup()
	ctx := context.Background()
	sv, _ := a.Create(ctx, userA, domain.Spec{Name: "hb", Command: "sleep", AgentID: "a1"})
	rep := app.Report{ServiceID: sv.ID, Instance: domain.Instance{State: domain.StateRunning, PID: 7, Version: "1"}}
	if _, err := a.Sync(ctx, agent1, "a1", nil, []app.Report{rep}); err != nil {
		t.Fatal(err)
	}
	c.Advance(10 * time.Second)
	if n, err := a.MarkLost(ctx); err != nil || n != 0 {
		t.Fatalf("marked %d before the agent was lost, %v", n, err)
	}
	c.Advance(10 * time.Second)
	if n, err := a.MarkLost(ctx); err != nil || n != 1 {
		t.Fatalf("marked %d, %v", n, err)
	}
	got, _ := a.Get(ctx, userA, sv.ID)
	if state, _, _, _ := got.Summary(); state != domain.StateUnknown {
		t.Fatalf("state = %s", state)
	}
	// The agent is back: its report is recorded again.
	if _, err := a.Sync(ctx, agent1, "a1", nil, []app.Report{rep}); err != nil {
		t.Fatal(err)
	}
	got, _ = a.Get(ctx, userA, sv.ID)
	if state, _, _, _ := got.Summary(); state != domain.StateRunning {
		t.Fatalf("state after the agent came back = %s", state)
	}
}

func TestUpdateAndDeleteAreTheTenants(t *testing.T) {
	a, _, _ := setup()
	ctx := context.Background()
	sv, _ := a.Create(ctx, userA, domain.Spec{Name: "hb", Command: "sleep", AgentID: "a1"})
	stopped := domain.DesiredStopped
	if _, err := a.Update(ctx, userB, sv.ID, domain.Change{DesiredState: &stopped}); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("another tenant's update: %v", err)
	}
	if err := a.Delete(ctx, userB, sv.ID); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("another tenant's delete: %v", err)
	}
	got, err := a.Update(ctx, userA, sv.ID, domain.Change{DesiredState: &stopped})
	if err != nil || got.Spec.DesiredState != domain.DesiredStopped {
		t.Fatalf("update = %+v, %v", got, err)
	}
	if l, _ := a.List(ctx, userA); len(l) != 1 {
		t.Fatalf("list = %+v", l)
	}
}

func TestOnAgentsShowsEveryTenantsServicesOnEachAgentToOperators(t *testing.T) {
	a, _, c := setup()
	ctx := context.Background()
	operator := app.Caller{Tenant: "*", Subject: "op-1"}
	pinned, _ := a.Create(ctx, userA, domain.Spec{Name: "hb", Command: "sleep", AgentID: "a1"})
	labelled, _ := a.Create(ctx, userB, domain.Spec{Name: "exporter", Version: "2", Command: "sleep", Labels: []string{"gpu"}})
	if _, err := a.Create(ctx, userA, domain.Spec{Name: "other", Command: "sleep", AgentID: "a2"}); err != nil {
		t.Fatal(err)
	}

	// Before a1 reports: only the pinned service, pending.
	got, err := a.OnAgents(ctx, operator, []string{"a1"})
	if err != nil || len(got["a1"]) != 1 || got["a1"][0].Service.ID != pinned.ID || got["a1"][0].Instance.State != domain.StatePending {
		t.Fatalf("before a report = %+v, %v", got, err)
	}

	c.Advance(time.Second)
	reports := []app.Report{
		{ServiceID: labelled.ID, Instance: domain.Instance{State: domain.StateRunning, PID: 4242, Restarts: 1, Version: "2"}},
	}
	if _, err := a.Sync(ctx, agent1, "a1", []string{"gpu"}, reports); err != nil {
		t.Fatal(err)
	}
	got, err = a.OnAgents(ctx, operator, []string{"a1", "a2", "a3"})
	if err != nil {
		t.Fatal(err)
	}
	on1 := got["a1"]
	if len(on1) != 2 || on1[0].Service.ID != pinned.ID || on1[1].Service.ID != labelled.ID {
		t.Fatalf("on a1 = %+v, want %s (t1) then %s (t2)", on1, pinned.ID, labelled.ID)
	}
	if in := on1[1].Instance; in.State != domain.StateRunning || in.PID != 4242 || in.Restarts != 1 || !in.At.Equal(c.Now()) {
		t.Errorf("reported instance = %+v", in)
	}
	if on1[1].Service.TenantID != "t2" || on1[1].Service.Spec.Version != "2" {
		t.Errorf("reported service = %+v", on1[1].Service)
	}
	if len(got["a2"]) != 1 || got["a2"][0].Instance.AgentID != "a2" {
		t.Errorf("on a2 = %+v", got["a2"])
	}
	if len(got["a3"]) != 0 {
		t.Errorf("on a3 = %+v", got["a3"])
	}

	// Tenants and agents may not look.
	for _, who := range []app.Caller{userA, agent1} {
		if _, err := a.OnAgents(ctx, who, []string{"a1"}); !errors.Is(err, app.ErrForbidden) {
			t.Errorf("%+v: %v, want forbidden", who, err)
		}
	}
}
