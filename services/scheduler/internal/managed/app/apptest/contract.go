package apptest

import (
	"context"
	"errors"
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

	// Deleted: gone from every read.
	if _, err := s.Mutate(ctx, "t1", "01-b", func(cur domain.Service) ([]domain.Record, error) { return cur.Delete(T0, "key-t1") }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "t1", "01-b"); !errors.Is(err, task.ErrNotFound) {
		t.Errorf("get of a deleted service: %v", err)
	}
	if l, _ := s.List(ctx, "t1"); len(l) != 1 {
		t.Errorf("list after delete = %d", len(l))
	}
}
