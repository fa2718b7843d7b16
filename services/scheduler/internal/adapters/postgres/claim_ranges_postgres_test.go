package postgres_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app/apptest"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// A claim reads each range its agent may take — open tasks, its machine's,
// its address's, the label sets within its labels — and returns their
// union in (priority, created_at) order, never a task for another machine,
// address or label set.
func TestClaimTakesTheRangesItsAgentMayTake(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 2})
	t.Cleanup(store.Close)
	at := apptest.T0
	create := func(id string, prio int, o func(*domain.SpecInput)) {
		t.Helper()
		at = at.Add(time.Second)
		spec := apptest.Spec(t, id, func(in *domain.SpecInput) {
			in.Priority = &prio
			if o != nil {
				o(in)
			}
		})
		recs := domain.Submit(at, id, "acme", "user", "", "", spec, "")
		if _, err := store.Create(ctx, app.NewTasks{Tenant: "acme", At: at, Tasks: [][]domain.Record{recs}}); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	labels := func(l ...string) func(*domain.SpecInput) { return func(in *domain.SpecInput) { in.Labels = l } }
	create("backlog-h100", 1, labels("gpu:h100"))
	create("open-5", 5, nil)
	create("a100", 3, labels("gpu:a100"))
	create("other-machine", 1, func(in *domain.SpecInput) { in.MachineID = "m2" })
	create("mine", 4, func(in *domain.SpecInput) { in.MachineID = "m1" })
	create("a100-eu", 2, labels("gpu:a100", "region:eu"))
	create("a100-us", 2, labels("gpu:a100", "region:us"))
	create("open-1", 1, nil)
	create("mine-a100-only", 6, func(in *domain.SpecInput) { in.MachineID = "m1"; in.Labels = []string{"gpu:a100"} })
	create("backlog-h100-eu", 1, labels("gpu:h100", "region:eu"))

	cases := []struct {
		name    string
		machine string
		labels  []string
		want    []string
	}{
		{"no labels", "m0", nil, []string{"open-1", "open-5"}},
		{"its machine", "m1", nil, []string{"open-1", "mine", "open-5"}},
		{"a100 in eu", "m1", []string{"region:eu", "gpu:a100"}, []string{"open-1", "a100-eu", "a100", "mine", "open-5", "mine-a100-only"}},
		{"eu only", "m0", []string{"region:eu"}, []string{"open-1", "open-5"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			got, err := postgres.ClaimCandidates(ctx, tx, app.ClaimFilter{Tenant: "*", Machine: c.machine, Labels: c.labels, Limit: 10,
				Now: at.Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(taskIDs(got), c.want) {
				t.Errorf("candidates = %v, want %v", taskIDs(got), c.want)
			}
		})
	}

	// The limit holds over the union: the first two by priority.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	got, err := postgres.ClaimCandidates(ctx, tx, app.ClaimFilter{Tenant: "*", Machine: "m1", Labels: []string{"gpu:a100", "region:us"},
		Limit: 2, Now: at.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"open-1", "a100-us"}; !slices.Equal(taskIDs(got), want) {
		t.Errorf("limit 2: candidates = %v, want %v", taskIDs(got), want)
	}
}

// The active-status index covers exactly the statuses a task leaves.
func TestActiveStatusesAreTheNonFinalOnes(t *testing.T) {
	for _, s := range domain.Statuses() {
		listed := strings.Contains(postgres.ActiveStatuses, "'"+string(s)+"'")
		if listed == s.Final() {
			t.Errorf("status %s: in the active index's predicate %v, final %v", s, listed, s.Final())
		}
	}
}
