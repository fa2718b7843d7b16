package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

var (
	benchUser  = app.Caller{Tenant: "t1", Subject: "user"}
	benchAgent = app.Caller{Tenant: "*", Subject: "agent:a1", AgentID: "a1"}
)

// benchApp is the use cases over this package's stores on a fresh
// database.
func benchApp(b *testing.B) (*app.App, context.Context) {
	pool := pgtest.New(b).Open(b, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 4})
	b.Cleanup(store.Close)
	return app.New(app.Stores{Tasks: store, Views: postgres.TaskViews{DB: pool}, Agents: postgres.Agents{DB: pool},
		Sweeps: postgres.SweepQueries{DB: pool}, Sweeper: postgres.SweeperLock{DB: pool}}, nil, time.Now, app.NewHub(), app.Config{}, nil), context.Background()
}

// BenchmarkTaskLifecycle runs one no-op task through the burn-down path
// per iteration — create, claim, start, renew, complete — one caller at a
// time, through the use cases and this store. Its allocations per
// operation show what the path costs in memory; its time is round trips
// on whatever machine runs it (make bench measures throughput).
func BenchmarkTaskLifecycle(b *testing.B) {
	a, ctx := benchApp(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.CreateTasks(ctx, benchUser, domain.SpecInput{Name: "noop", Type: domain.TypeNoop}, ""); err != nil {
			b.Fatal(err)
		}
		tasks, _, err := a.ClaimTasks(ctx, benchAgent, app.ClaimRequest{AgentID: "a1", MachineID: "m1", Limit: 1})
		if err != nil || len(tasks) != 1 {
			b.Fatal(len(tasks), err)
		}
		t := tasks[0]
		if _, err := a.StartTask(ctx, benchAgent, t.ID, "a1", t.AttemptID); err != nil {
			b.Fatal(err)
		}
		if _, err := a.RenewLease(ctx, benchAgent, t.ID, "a1", t.AttemptID, 60); err != nil {
			b.Fatal(err)
		}
		if _, err := a.CompleteTask(ctx, benchAgent, t.ID, app.Completion{AgentID: "a1", AttemptID: t.AttemptID}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeat is one agent's heartbeat while it runs 8 tasks: what
// the scheduler does for it — record the agent, read its tasks, answer —
// through the use case and these stores. Its time is round trips: on a
// loaded machine each one waits for the database to be scheduled, and a
// heartbeat answered too late fences a live agent (docs/executor.md,
// "Fencing").
func BenchmarkHeartbeat(b *testing.B) {
	a, ctx := benchApp(b)
	var attempts []string
	for range 8 {
		if _, err := a.CreateTasks(ctx, benchUser, domain.SpecInput{Name: "noop", Type: domain.TypeNoop}, ""); err != nil {
			b.Fatal(err)
		}
		tasks, _, err := a.ClaimTasks(ctx, benchAgent, app.ClaimRequest{AgentID: "a1", MachineID: "m1", Limit: 1})
		if err != nil || len(tasks) != 1 {
			b.Fatal(len(tasks), err)
		}
		if _, err := a.StartTask(ctx, benchAgent, tasks[0].ID, "a1", tasks[0].AttemptID); err != nil {
			b.Fatal(err)
		}
		attempts = append(attempts, tasks[0].AttemptID)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.SendHeartbeat(ctx, benchAgent, app.Heartbeat{AgentID: "a1", MachineID: "m1", AttemptIDs: attempts, FreeSlots: 0, Slots: 8}); err != nil {
			b.Fatal(err)
		}
	}
}
