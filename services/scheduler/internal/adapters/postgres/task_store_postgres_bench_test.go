package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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
	a, _ := benchAppCountingClaims(b)
	return a, context.Background()
}

// claimCounter counts the claims that reach the store.
type claimCounter struct {
	app.TaskStore
	claims atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, agentID, requestID string, f app.ClaimFilter,
	lease func([]domain.Task) ([][]domain.Record, error)) ([]domain.Task, error) {
	c.claims.Add(1)
	return c.TaskStore.Claim(ctx, agentID, requestID, f, lease)
}

func benchAppCountingClaims(b *testing.B) (*app.App, *claimCounter) {
	return benchReplica(b, pgtest.New(b), app.NewHub())
}

// benchReplica is one scheduler replica's use cases over this package's
// stores, on its own pool of db, with hub.
func benchReplica(b *testing.B, db *pgtest.DB, hub *app.Hub) (*app.App, *claimCounter) {
	pool := db.Open(b, scheduler.Schema)
	store := postgres.NewTaskStore(pool, postgres.TaskStoreOptions{Writers: 4})
	b.Cleanup(store.Close)
	counted := &claimCounter{TaskStore: store}
	return app.New(app.Stores{Tasks: counted, Views: postgres.TaskViews{DB: pool}, Agents: postgres.Agents{DB: pool},
		Sweeps: postgres.SweepQueries{DB: pool}, Sweeper: postgres.SweeperLock{DB: pool}}, nil, time.Now, hub, app.Config{}, nil), counted
}

// waitingAgents starts n agents (prefix0, prefix1, ...) that long-poll a
// for one task at a time and send the ids of the tasks they take to
// taken, until ctx is done; wait for them with the returned WaitGroup.
func waitingAgents(ctx context.Context, b *testing.B, a *app.App, prefix string, n int, taken chan<- string) *sync.WaitGroup {
	var agents sync.WaitGroup
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		caller := app.Caller{Tenant: "*", Subject: "agent:" + id, AgentID: id}
		agents.Add(1)
		go func() {
			defer agents.Done()
			for ctx.Err() == nil {
				tasks, _, err := a.ClaimTasks(ctx, caller, app.ClaimRequest{AgentID: id, MachineID: "m-" + id, Limit: 1, Wait: time.Minute})
				if err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
				for _, t := range tasks {
					taken <- t.ID
				}
			}
		}()
	}
	return &agents
}

// submitOneAtATime submits a no-op task on a and waits until an agent
// took it, b.N times, and reports claims/task: the claims that reached
// the counted stores per task.
func submitOneAtATime(ctx context.Context, b *testing.B, a *app.App, taken <-chan string, counted ...*claimCounter) {
	claims := func() (n int64) {
		for _, c := range counted {
			n += c.claims.Load()
		}
		return n
	}
	before := claims()
	b.ReportAllocs()
	for b.Loop() {
		created, err := a.CreateTasks(ctx, benchUser, domain.SpecInput{Name: "noop", Type: domain.TypeNoop}, "")
		if err != nil {
			b.Fatal(err)
		}
		if got := <-taken; got != created[0].ID {
			b.Fatalf("an agent took %s, want %s", got, created[0].ID)
		}
	}
	b.ReportMetric(float64(claims()-before)/float64(b.N), "claims/task")
}

// BenchmarkTaskToWaitingAgents submits one no-op task per iteration while
// 8 agents long-poll for work, one slot each, and waits until an agent
// has it. claims/task is how many claims reached the store per task: the
// waiting claims a submission woke (docs/decisions/0115-a-task-wakes-one-claim.md).
func BenchmarkTaskToWaitingAgents(b *testing.B) {
	a, counted := benchAppCountingClaims(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	taken := make(chan string, 8)
	agents := waitingAgents(ctx, b, a, "a", 8, taken)
	// Every agent waiting before the first submission.
	for counted.claims.Load() < 8 {
		time.Sleep(time.Millisecond)
	}
	submitOneAtATime(ctx, b, a, taken, counted)
	cancel()
	agents.Wait()
}

// BenchmarkTaskToWaitingAgentsOnTwoReplicas is the same on two scheduler
// replicas of one database, 4 agents waiting on each, every task submitted
// on the first: the second hears of it through LISTEN/NOTIFY
// (postgres.Wakeups). claims/task counts the claims of both.
func BenchmarkTaskToWaitingAgentsOnTwoReplicas(b *testing.B) {
	db := pgtest.New(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	taken := make(chan string, 8)
	var apps [2]*app.App
	var counted [2]*claimCounter
	hubs := []*app.Hub{app.NewHub(), app.NewHub()}
	for i := range apps {
		apps[i], counted[i] = benchReplica(b, db, hubs[i])
	}
	runWakeups(b, db, hubs...)
	agents := []*sync.WaitGroup{waitingAgents(ctx, b, apps[0], "first", 4, taken), waitingAgents(ctx, b, apps[1], "second", 4, taken)}
	for counted[0].claims.Load() < 4 || counted[1].claims.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	// LISTEN begins asynchronously: submit until the second replica's
	// claims hear of the first's work.
	deadline := time.Now().Add(10 * time.Second)
	for heard := counted[1].claims.Load(); counted[1].claims.Load() == heard; {
		if time.Now().After(deadline) {
			b.Fatal("the second replica never heard of the first's work")
		}
		if _, err := apps[0].CreateTasks(ctx, benchUser, domain.SpecInput{Name: "noop", Type: domain.TypeNoop}, ""); err != nil {
			b.Fatal(err)
		}
		<-taken
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the last signal's claims return to waiting
	submitOneAtATime(ctx, b, apps[0], taken, counted[:]...)
	cancel()
	for _, a := range agents {
		a.Wait()
	}
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
