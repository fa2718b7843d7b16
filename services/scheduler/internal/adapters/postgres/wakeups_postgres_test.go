package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// runWakeups carries work between hubs, each a replica on db, with
// postgres.Wakeups, until the test ends.
func runWakeups(tb testing.TB, db *pgtest.DB, hubs ...*app.Hub) {
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for _, h := range hubs {
		w := postgres.Wakeups{DB: db.Open(tb, scheduler.Schema)}
		running.Add(1)
		go func() { defer running.Done(); w.Run(ctx, h) }()
	}
	tb.Cleanup(func() { cancel(); running.Wait() })
}

// Work appearing on one replica wakes the claims waiting on another.
func TestWakeupsCarryWorkToOtherReplicas(t *testing.T) {
	db := pgtest.New(t)
	here, there := app.NewHub(), app.NewHub()
	runWakeups(t, db, here, there)
	waiting := there.Wait(app.ClaimWaiter{AgentID: "a-there", Tenant: "*"})
	defer waiting.Stop()
	// LISTEN starts asynchronously: signal until the other replica hears.
	deadline := time.After(10 * time.Second)
	for woken := false; !woken; {
		here.WakeClaimers()
		select {
		case <-waiting.Woken():
			woken = true
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("the other replica's claims were not woken")
		}
	}
	// Its own signal does not come back to the replica that sent it.
	mine := here.Wait(app.ClaimWaiter{AgentID: "a-here", Tenant: "*"})
	defer mine.Stop()
	time.Sleep(100 * time.Millisecond) // the signals of the loop above arrive
	for _, w := range []*app.Waiting{mine, waiting} {
		select {
		case <-w.Woken():
		default:
		}
	}
	here.WakeClaimers()
	select {
	case <-mine.Woken(): // WakeClaimers woke this replica's claims itself, once
	default:
		t.Fatal("WakeClaimers did not wake this replica's claims")
	}
	select {
	case <-waiting.Woken():
	case <-time.After(10 * time.Second):
		t.Fatal("the other replica's claims were not woken")
	}
	select {
	case <-mine.Woken():
		t.Fatal("the replica heard its own signal back and woke its claims again")
	case <-time.After(300 * time.Millisecond):
	}
}

// A task that appeared on one replica wakes one claim on another, whose
// agent may take it; when that claim finds nothing, the wake goes on only
// while the database still has the task pending.
func TestWakeupsCarryTasksToOneClaimOfAnotherReplica(t *testing.T) {
	db := pgtest.New(t)
	here, there := app.NewHub(), app.NewHub()
	runWakeups(t, db, here, there)
	gpu := there.Wait(app.ClaimWaiter{AgentID: "gpu", Tenant: "*", Labels: []string{"gpu"}})
	plain := there.Wait(app.ClaimWaiter{AgentID: "plain", Tenant: "*"})
	defer gpu.Stop()
	defer plain.Stop()
	woken := func(w *app.Waiting, within time.Duration) bool {
		select {
		case <-w.Woken():
			return true
		case <-time.After(within):
			return false
		}
	}
	// LISTEN starts asynchronously: signal until the other replica hears.
	deadline := time.Now().Add(10 * time.Second)
	for !woken(plain, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other replica's claims were not woken")
		}
		here.WakeClaimers()
	}
	// The loop's signals may still be on their way (a NOTIFY can take
	// longer than the loop's 50 ms on a loaded machine, and one arriving
	// later would wake plain below): go on once neither agent has been
	// woken for a second.
	settle := time.Now().Add(30 * time.Second)
settling:
	for {
		select {
		case <-gpu.Woken():
		case <-plain.Woken():
		case <-time.After(time.Second):
			break settling
		}
		if time.Now().After(settle) {
			t.Fatal("the agents were still being woken 30 s after the signals stopped")
		}
	}

	labelled := domain.Task{ID: "labelled", TenantID: "t1", Status: domain.StatusPending, Spec: domain.Spec{Type: "noop", Labels: []string{"gpu"}}}
	here.TasksAppeared([]domain.Task{labelled})
	if !woken(gpu, 10*time.Second) {
		t.Fatal("a task labelled gpu did not wake the other replica's gpu agent")
	}
	if woken(plain, 300*time.Millisecond) {
		t.Error("a task labelled gpu woke an agent without the label")
	}
	gpu.Claiming(false)
	gpu.Claimed(nil)
	if _, err := db.Open(t, scheduler.Schema).Exec(t.Context(), `INSERT INTO tasks (id, tenant_id, status, priority, type, retry_at,
		created_at, updated_at, version, doc) VALUES ('still', 't1', 'pending', 5, 'noop', now(), now(), now(), 1, '{}')`); err != nil {
		t.Fatal(err)
	}
	// gpu's claim finds nothing. The wake goes on to plain only while the
	// task is pending: "gone" is not (another replica's agent took it).
	for _, c := range []struct {
		id       string
		handedOn bool
	}{{"gone", false}, {"still", true}} {
		here.TasksAppeared([]domain.Task{{ID: c.id, TenantID: "t1", Status: domain.StatusPending, Spec: domain.Spec{Type: "noop"}}})
		if !woken(gpu, 10*time.Second) {
			t.Fatalf("task %s did not wake the longest waiting agent there", c.id)
		}
		gpu.Claiming(false)
		gpu.Claimed(nil)
		if got := woken(plain, time.Second); got != c.handedOn {
			t.Errorf("task %s: the wake went on to the next agent = %v, want %v", c.id, got, c.handedOn)
		}
	}
}

func TestWakeupPayloads(t *testing.T) {
	task := func(id string) domain.Task {
		return domain.Task{ID: id, TenantID: "t1", Status: domain.StatusPending,
			Spec: domain.Spec{Type: "shell", MachineID: "m1", TargetIP: "127.0.0.9", Labels: []string{"gpu", "a100"}}}
	}
	// Tasks round-trip with what a claim's match reads.
	own, tasks, all := postgres.DecodeWakeup(postgres.EncodeWakeup("r1", []domain.Task{task("x"), task("y")}, false), "r2")
	if own || all || len(tasks) != 2 || tasks[1].ID != "y" || tasks[0].TenantID != "t1" || tasks[0].Spec.MachineID != "m1" ||
		tasks[0].Spec.TargetIP != "127.0.0.9" || tasks[0].Spec.Type != "shell" || !slices.Equal(tasks[0].Spec.Labels, []string{"gpu", "a100"}) ||
		tasks[0].Status != domain.StatusPending {
		t.Errorf("decoded %+v (own %v, all %v)", tasks, own, all)
	}
	// A replica's own payload.
	if own, _, _ := postgres.DecodeWakeup(postgres.EncodeWakeup("r1", []domain.Task{task("x")}, false), "r1"); !own {
		t.Error("a replica's own payload was not recognised")
	}
	// Too many tasks for a payload: every claim.
	var many []domain.Task
	for i := range 200 {
		many = append(many, task(fmt.Sprintf("%036d", i)))
	}
	big := postgres.EncodeWakeup("r1", many, false)
	if len(big) >= 8000 {
		t.Errorf("payload of %d bytes; Postgres takes under 8000", len(big))
	}
	if _, tasks, all := postgres.DecodeWakeup(big, "r2"); !all || tasks != nil {
		t.Errorf("200 tasks: %d tasks, all %v; want all", len(tasks), all)
	}
	if _, _, all := postgres.DecodeWakeup(postgres.EncodeWakeup("r1", nil, true), "r2"); !all {
		t.Error("all was not carried")
	}
	// What another build or anything else sends wakes every claim; a
	// replica of an earlier build sends its id alone.
	for _, p := range []string{"6f0c1c9e-6d55-4b8e-9b55-0d2f6c7e8a90", "", "{", `{"tasks":[{"id":"x"}]}`, `{"from":"r1"}`,
		`{"from":"r1","tasks":[{"tenant":"t1"}]}`, `{"from":"r1","tasks":"x"}`, strings.Repeat("[", 5000)} {
		if own, tasks, all := postgres.DecodeWakeup(p, "r2"); own || !all || tasks != nil {
			t.Errorf("payload %.40q: own %v, %d tasks, all %v; want all", p, own, len(tasks), all)
		}
	}
}
