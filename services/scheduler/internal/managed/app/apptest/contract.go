package apptest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/managed/domain"
)

// T0 is the contract's clock.
var T0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// StoreContract holds a Store to the behaviour the use cases rely on: a
// fresh, empty store from newStore.
func StoreContract(t *testing.T, newStore func(t *testing.T) app.Store) {
	ctx := context.Background()
	s := newStore(t)
	create := func(id, tenant, name string) domain.Service {
		t.Helper()
		recs, err := domain.New(T0, id, tenant, "key-"+tenant, domain.Spec{Name: name, Command: "sleep", AgentID: "agent-1"})
		if err != nil {
			t.Fatal(err)
		}
		sv, err := s.Create(ctx, recs)
		if err != nil || sv.ID != id || sv.Version != 1 {
			t.Fatalf("create %s = %+v, %v", id, sv, err)
		}
		return sv
	}
	create("01-b", "t1", "beta")
	create("01-a", "t1", "alpha")
	create("01-c", "t2", "gamma")

	// Tenancy: another tenant's service is not found; "*" sees all.
	if _, err := s.Get(ctx, "t2", "01-a"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("another tenant's get: %v", err)
	}
	if _, err := s.Mutate(ctx, "t2", "01-a", func(domain.Service) ([]domain.Record, error) { return nil, nil }); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("another tenant's mutate: %v", err)
	}
	if l, err := s.List(ctx, "t1"); err != nil || len(l) != 2 || l[0].Spec.Name != "alpha" || l[1].Spec.Name != "beta" {
		t.Errorf("list t1 = %+v, %v", l, err)
	}
	if l, _ := s.List(ctx, "*"); len(l) != 3 {
		t.Errorf("list * = %d services", len(l))
	}

	// Mutate stores the records and returns the state after them; no
	// records, no change; an error from decide stores nothing.
	stopped := domain.DesiredStopped
	sv, err := s.Mutate(ctx, "t1", "01-a", func(cur domain.Service) ([]domain.Record, error) {
		return cur.Update(T0.Add(time.Second), "key-t1", domain.Change{DesiredState: &stopped})
	})
	if err != nil || sv.Version != 2 || sv.Spec.DesiredState != domain.DesiredStopped {
		t.Fatalf("update = %+v, %v", sv, err)
	}
	if _, err := s.Mutate(ctx, "*", "01-a", func(domain.Service) ([]domain.Record, error) { return nil, errors.New("no") }); err == nil {
		t.Error("decide's error was not returned")
	}
	if got, _ := s.Get(ctx, "t1", "01-a"); got.Version != 2 {
		t.Errorf("version after a refused decide = %d", got.Version)
	}

	// Reports: the instance's At is the last report's time.
	sv, err = s.Mutate(ctx, "*", "01-a", func(cur domain.Service) ([]domain.Record, error) {
		return cur.Report(T0.Add(2*time.Second), "agent-1", domain.Instance{State: domain.StateRunning, PID: 42, Version: "1"}), nil
	})
	if err != nil || sv.Instances["agent-1"].PID != 42 {
		t.Fatalf("report = %+v, %v", sv, err)
	}
	if err := s.Seen(ctx, "agent-1", []string{"01-a"}, T0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "t1", "01-a"); !got.Instances["agent-1"].At.Equal(T0.Add(time.Minute)) {
		t.Errorf("instance at %v, want the last report's time", got.Instances["agent-1"].At)
	}
	if silent, err := s.Silent(ctx, T0.Add(time.Minute)); err != nil || len(silent) != 0 {
		t.Errorf("silent before its report = %+v, %v", silent, err)
	}
	silent, err := s.Silent(ctx, T0.Add(2*time.Minute))
	if err != nil || len(silent) != 1 || silent[0] != (app.Placement{ServiceID: "01-a", AgentID: "agent-1"}) {
		t.Fatalf("silent = %+v, %v", silent, err)
	}
	if err := s.MarkLost(ctx, silent[0]); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Silent(ctx, T0.Add(2*time.Minute)); len(again) != 0 {
		t.Errorf("silent after MarkLost = %+v", again)
	}
	// A new report clears it.
	if err := s.Seen(ctx, "agent-1", []string{"01-a"}, T0.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Silent(ctx, T0.Add(4*time.Minute)); len(again) != 1 {
		t.Errorf("silent after a new report = %+v", again)
	}

	// OnAgents: every tenant's services pinned to or reported by the
	// agents, by tenant, name and id, with the instances' last report.
	recs, err := domain.New(T0, "01-d", "t2", "key-t2", domain.Spec{Name: "delta", Command: "sleep", AgentID: "agent-2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Seen(ctx, "agent-3", []string{"01-d"}, T0.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	onAgents := func(ids ...string) []string {
		t.Helper()
		got, err := s.OnAgents(ctx, ids)
		if err != nil {
			t.Fatalf("on agents %v: %v", ids, err)
		}
		out := make([]string, len(got))
		for i, sv := range got {
			out[i] = sv.ID
		}
		return out
	}
	if got := onAgents("agent-1"); !slices.Equal(got, []string{"01-a", "01-b", "01-c"}) {
		t.Errorf("on agent-1 = %v", got)
	}
	if got := onAgents("agent-2"); !slices.Equal(got, []string{"01-d"}) {
		t.Errorf("on agent-2 (pinned) = %v", got)
	}
	if got := onAgents("agent-3"); !slices.Equal(got, []string{"01-d"}) {
		t.Errorf("on agent-3 (reported) = %v", got)
	}
	if got := onAgents("agent-2", "agent-3", "nobody"); !slices.Equal(got, []string{"01-d"}) {
		t.Errorf("on agent-2 and agent-3 = %v, want each service once", got)
	}
	if got := onAgents("nobody"); len(got) != 0 {
		t.Errorf("on an unknown agent = %v", got)
	}
	if got, _ := s.OnAgents(ctx, []string{"agent-1"}); len(got) == 0 || !got[0].Instances["agent-1"].At.Equal(T0.Add(3*time.Minute)) {
		t.Errorf("on agent-1: instance at %+v, want the last report's time", got)
	}

	// Deleted: gone from every read.
	if _, err := s.Mutate(ctx, "t1", "01-b", func(cur domain.Service) ([]domain.Record, error) { return cur.Delete(T0, "key-t1") }); err != nil {
		t.Fatal(err)
	}
	if got := onAgents("agent-1"); !slices.Equal(got, []string{"01-a", "01-c"}) {
		t.Errorf("on agent-1 after a delete = %v", got)
	}
	if _, err := s.Get(ctx, "t1", "01-b"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("get of a deleted service: %v", err)
	}
	if l, _ := s.List(ctx, "t1"); len(l) != 1 {
		t.Errorf("list after delete = %d", len(l))
	}
}
