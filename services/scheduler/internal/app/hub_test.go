package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// woken reports whether w was woken, and takes the wake.
func woken(w *app.Waiting) bool {
	select {
	case <-w.Woken():
		return true
	default:
		return false
	}
}

// wokenOnly fails t unless exactly the waiters in want were woken; it
// takes their wakes.
func wokenOnly(t *testing.T, what string, all map[string]*app.Waiting, want ...string) {
	t.Helper()
	for name, w := range all {
		expected := false
		for _, n := range want {
			expected = expected || n == name
		}
		if got := woken(w); got != expected {
			t.Errorf("%s: %s woken = %v, want %v", what, name, got, expected)
		}
	}
}

// waitingAgents registers a waiting claim for each agent, in order, that
// may take any task; they stop when the test ends.
func waitingAgents(t *testing.T, hub *app.Hub, ids ...string) map[string]*app.Waiting {
	all := map[string]*app.Waiting{}
	for _, id := range ids {
		w := hub.Wait(app.ClaimWaiter{AgentID: id, Tenant: "*"})
		t.Cleanup(w.Stop) // a second Stop does nothing
		all[id] = w
	}
	return all
}

func pending(id string, o ...func(*domain.Task)) domain.Task {
	t := domain.Task{ID: id, TenantID: "t1", Status: domain.StatusPending}
	for _, f := range o {
		f(&t)
	}
	return t
}

func TestHubWakesClaimsHereAndAsksOnceForTheOtherReplicas(t *testing.T) {
	hub := app.NewHub()
	w := hub.Wait(app.ClaimWaiter{AgentID: "a1", Tenant: "*"})
	defer w.Stop()
	hub.WakeClaimers()
	hub.WakeClaimers() // a burst: one signal to the other replicas
	if !woken(w) {
		t.Error("local claims were not woken")
	}
	<-hub.OtherReplicas()
	select {
	case <-hub.OtherReplicas():
		t.Error("a burst asked the other replicas twice")
	default:
	}
	// Another replica's work wakes local claims only.
	hub.WakeLocal()
	if !woken(w) {
		t.Error("another replica's work did not wake local claims")
	}
	select {
	case <-hub.OtherReplicas():
		t.Error("another replica's signal was sent back out")
	default:
	}
	// A task becoming pending wakes claims and the other replicas; other
	// changes do not.
	hub.Changed(domain.Task{ID: "x", TenantID: "t1", Status: domain.StatusRunning})
	if woken(w) {
		t.Error("a running task woke claims")
	}
	hub.Changed(pending("x"))
	if !woken(w) {
		t.Error("a pending task did not wake the claim that may take it")
	}
	<-hub.OtherReplicas()
}

func TestATaskWakesOneClaimWhoseAgentMayTakeIt(t *testing.T) {
	hub := app.NewHub()
	all := map[string]*app.Waiting{
		// In the order they began to wait.
		"plain":   hub.Wait(app.ClaimWaiter{AgentID: "plain", Tenant: "*", Machine: "m1"}),
		"gpu":     hub.Wait(app.ClaimWaiter{AgentID: "gpu", Tenant: "*", Machine: "m2", Labels: []string{"gpu"}}),
		"tenant2": hub.Wait(app.ClaimWaiter{AgentID: "tenant2", Tenant: "t2", Machine: "m3"}),
		"drained": hub.Wait(app.ClaimWaiter{AgentID: "drained", Tenant: "*", Machine: "m4", Labels: []string{"gpu"}, Drained: true}),
		"m5":      hub.Wait(app.ClaimWaiter{AgentID: "m5", Tenant: "*", Machine: "m5", Types: []string{"video"}}),
	}
	for _, w := range all {
		defer w.Stop()
	}
	hub.TasksAppeared([]domain.Task{pending("any")})
	wokenOnly(t, "a task any agent may take", all, "plain")

	hub.TasksAppeared([]domain.Task{pending("labelled", func(t *domain.Task) { t.Spec.Labels = []string{"gpu"} })})
	wokenOnly(t, "a task labelled gpu", all, "gpu")

	hub.TasksAppeared([]domain.Task{pending("of t2", func(t *domain.Task) { t.TenantID = "t2" })})
	wokenOnly(t, "a task of tenant t2 (plain and gpu hold wakes)", all, "tenant2")

	// Every agent that may take a task holds a wake no claim has answered
	// yet: their claims look after the task was committed, so no one more
	// is woken.
	hub.TasksAppeared([]domain.Task{pending("another")})
	wokenOnly(t, "a task while its takers hold wakes", all)

	// A claim under way has answered its wake: plain may be woken again.
	all["plain"].Claiming(false)
	hub.TasksAppeared([]domain.Task{pending("video", func(t *domain.Task) { t.Spec.Type = "video" })})
	wokenOnly(t, "a video task", all, "plain")
	hub.TasksAppeared([]domain.Task{pending("for m5", func(t *domain.Task) { t.Spec.MachineID = "m5"; t.Spec.Type = "video" })})
	wokenOnly(t, "a video task for machine m5", all, "m5")
}

func TestAWakeNoClaimAnsweredIsHandedOn(t *testing.T) {
	hub := app.NewHub()
	all := waitingAgents(t, hub, "a1", "a2", "a3")
	a1, a2, a3 := all["a1"], all["a2"], all["a3"]

	hub.TasksAppeared([]domain.Task{pending("x")})
	wokenOnly(t, "a task", all, "a1")
	// a1's claim leases nothing (another replica's agent took the task,
	// or a row another claim held): the wake goes on to a2.
	a1.Claiming(false)
	a1.Claimed(nil)
	wokenOnly(t, "a1's claim leased nothing", all, "a2")
	// a2 now drained: its claim leases nothing, on to a3.
	a2.Claiming(true)
	a2.Claimed(nil)
	wokenOnly(t, "a2's claim leased nothing", all, "a3")
	// a3 leases nothing either: every agent tried the task, the wake ends.
	a3.Claiming(false)
	a3.Claimed(nil)
	wokenOnly(t, "every agent tried the task", all)

	// A claim that leases the task ends its wake.
	hub.TasksAppeared([]domain.Task{pending("y")})
	wokenOnly(t, "a second task", all, "a1")
	a1.Claiming(false)
	a1.Claimed([]domain.Task{pending("y")})
	wokenOnly(t, "a1's claim leased the task", all)

	// One that leases other tasks hands the wake on: its agent's slots
	// may stay full for as long as those run. (a2 is drained.)
	hub.TasksAppeared([]domain.Task{pending("v")})
	wokenOnly(t, "a third task", all, "a1")
	a1.Claiming(false)
	a1.Claimed([]domain.Task{pending("more urgent")})
	wokenOnly(t, "a1's claim leased another task", all, "a3")
	a3.Claiming(false)
	a3.Claimed([]domain.Task{pending("v")})
	wokenOnly(t, "a3's claim leased the task", all)

	// A wake that came while the last claim was under way, answered by
	// no claim, is handed on when the claim stops waiting: its claim may
	// have leased other tasks and not that one.
	a1.Claiming(false)
	hub.TasksAppeared([]domain.Task{pending("z")})
	wokenOnly(t, "a task while a1's claim is under way", all, "a1")
	a1.Claimed([]domain.Task{pending("earlier")})
	a1.Stop()
	wokenOnly(t, "a1 stopped with a wake no claim answered", all, "a3") // a2 is drained
	// A stopped claim is woken by nothing.
	hub.WakeClaimers()
	wokenOnly(t, "everyone woken after a1 stopped", all, "a2", "a3")
	a2.Stop()
	hub.WakeClaimers()
	wokenOnly(t, "everyone woken after a2 stopped", all, "a3")
}

func TestAClaimThatLeasesATaskEndsItsWake(t *testing.T) {
	hub := app.NewHub()
	all := waitingAgents(t, hub, "a1", "a2", "a3")
	a1, a3 := all["a1"], all["a3"]
	a3.Claiming(false) // a claim under way, woken by nothing
	hub.TasksAppeared([]domain.Task{pending("x")})
	wokenOnly(t, "a task", all, "a1")
	// a3's claim takes x before a1's looks; a1's finds nothing and the
	// wake ends there, rather than going on through every agent.
	a3.Claimed([]domain.Task{pending("x")})
	a1.Claiming(false)
	a1.Claimed(nil)
	wokenOnly(t, "a1 found nothing after a3 leased the task", all)
}

func TestWorkWhoseTakerTheHubCannotTellWakesEveryClaim(t *testing.T) {
	hub := app.NewHub()
	all := waitingAgents(t, hub, "a1", "a2")
	for what, t2 := range map[string]domain.Task{
		"a task waiting for others": pending("dep", func(t *domain.Task) { t.Spec.DependsOn = []string{"x"} }),
		"a scatter fan-out's task":  pending("sc", func(t *domain.Task) { t.Spec.Mode = domain.ModeScatter }),
		"a task awaiting admission": pending("q", func(t *domain.Task) { t.ClusterQueue = "cq" }),
	} {
		hub.TasksAppeared([]domain.Task{t2})
		wokenOnly(t, what, all, "a1", "a2")
	}
	hub.Changed(domain.Task{ID: "member", TenantID: "t1", Status: domain.StatusCompleted, Spec: domain.Spec{GroupID: "g"}})
	wokenOnly(t, "a completed group member", all, "a1", "a2")
	hub.Changed(domain.Task{ID: "lone", TenantID: "t1", Status: domain.StatusCompleted})
	wokenOnly(t, "a completed task of no group", all)
}

func TestHubNamesTheTasksItAsksTheOtherReplicasToTake(t *testing.T) {
	hub := app.NewHub()
	names := func() (ids []string, all bool) {
		tasks, all := hub.ForOtherReplicas()
		for _, t := range tasks {
			ids = append(ids, t.ID)
		}
		return ids, all
	}
	hub.TasksAppeared([]domain.Task{pending("x"), pending("y")})
	hub.Changed(pending("z"))
	<-hub.OtherReplicas()
	if ids, all := names(); all || !slices.Equal(ids, []string{"x", "y", "z"}) {
		t.Errorf("after three tasks: %v (all %v), want [x y z]", ids, all)
	}
	if ids, all := names(); all || ids != nil {
		t.Errorf("taken twice: %v (all %v), want nothing", ids, all)
	}
	// Work whose taker the hub cannot tell, and more tasks than a signal
	// names, wake every claim there.
	for what, appear := range map[string]func(){
		"a task waiting for others": func() {
			hub.TasksAppeared([]domain.Task{pending("a"), pending("dep", func(t *domain.Task) { t.Spec.DependsOn = []string{"x"} })})
		},
		"WakeClaimers": func() { hub.TasksAppeared([]domain.Task{pending("a")}); hub.WakeClaimers() },
		"many tasks": func() {
			for i := range 100 {
				hub.TasksAppeared([]domain.Task{pending(fmt.Sprint("t", i))})
			}
		},
	} {
		appear()
		<-hub.OtherReplicas()
		if ids, all := names(); !all || ids != nil {
			t.Errorf("%s: %v (all %v), want all", what, ids, all)
		}
	}
	// A task another replica names is not sent back out.
	hub.OtherReplicaTasks([]domain.Task{pending("theirs")})
	select {
	case <-hub.OtherReplicas():
		t.Error("another replica's task was sent back out")
	default:
	}
}

func TestAnotherReplicasTaskWakesOneClaimWhoseAgentMayTakeIt(t *testing.T) {
	hub := app.NewHub()
	all := map[string]*app.Waiting{
		"tenant2": hub.Wait(app.ClaimWaiter{AgentID: "tenant2", Tenant: "t2"}),
		"gpu":     hub.Wait(app.ClaimWaiter{AgentID: "gpu", Tenant: "*", Labels: []string{"gpu"}}),
		"plain":   hub.Wait(app.ClaimWaiter{AgentID: "plain", Tenant: "*"}),
	}
	for _, w := range all {
		defer w.Stop()
	}
	hub.OtherReplicaTasks([]domain.Task{pending("x", func(t *domain.Task) { t.Spec.Labels = []string{"gpu"} })})
	wokenOnly(t, "another replica's task labelled gpu", all, "gpu")
	// A task with a wake under way here gets no second one.
	hub.OtherReplicaTasks([]domain.Task{pending("x", func(t *domain.Task) { t.Spec.Labels = []string{"gpu"} })})
	wokenOnly(t, "the same task named again", all)
	hub.OtherReplicaTasks([]domain.Task{pending("y")})
	wokenOnly(t, "another replica's task any agent of t1 may take", all, "plain")
}

// pendingCheck is a hub's pending check that answers from a set, and
// sends the ids it was asked about on asked.
type pendingCheck struct {
	mu      sync.Mutex
	pending map[string]bool
	err     error
	asked   chan []string
}

func (p *pendingCheck) check(_ context.Context, ids []string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.asked <- ids }()
	if p.err != nil {
		return nil, p.err
	}
	var out []string
	for _, id := range ids {
		if p.pending[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

func (p *pendingCheck) set(pending map[string]bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending, p.err = pending, err
}

// wokenWithin fails t unless w is woken within a second (the hand-on of
// a checked wake happens after the check, in a goroutine of its own).
func wokenWithin(t *testing.T, what string, w *app.Waiting) {
	t.Helper()
	select {
	case <-w.Woken():
	case <-time.After(time.Second):
		t.Errorf("%s: not woken", what)
	}
}

func TestAWakeGoesOnOnlyWhileItsTaskIsPending(t *testing.T) {
	hub := app.NewHub()
	check := &pendingCheck{asked: make(chan []string, 8)}
	hub.SetPendingCheck(check.check)
	all := waitingAgents(t, hub, "a1", "a2", "a3")
	a1, a2, a3 := all["a1"], all["a2"], all["a3"]

	// Another replica's agent took x: a1's claim finds nothing, and the
	// wake ends rather than going to a2 and a3 in turn.
	hub.OtherReplicaTasks([]domain.Task{pending("x")})
	wokenOnly(t, "another replica's task", all, "a1")
	check.set(map[string]bool{}, nil)
	a1.Claiming(false)
	a1.Claimed(nil)
	if got := <-check.asked; !slices.Equal(got, []string{"x"}) {
		t.Errorf("asked about %v, want [x]", got)
	}
	// The same holds for this replica's own task.
	hub.TasksAppeared([]domain.Task{pending("own")})
	wokenOnly(t, "the wake of a task taken elsewhere ended; then a task of this replica", all, "a1")

	// Still pending (a row another claim held): on to a2.
	check.set(map[string]bool{"own": true}, nil)
	a1.Claiming(false)
	a1.Claimed(nil)
	<-check.asked
	wokenWithin(t, "a2, after a1's claim left a pending task", a2)
	// The check failing: the wake goes on, to a3.
	check.set(nil, errors.New("database down"))
	a2.Claiming(false)
	a2.Claimed(nil)
	<-check.asked
	wokenWithin(t, "a3, after the check failed", a3)
	// A wake whose task a claim leased meanwhile is not asked about.
	a3.Claiming(false)
	a1.Claiming(false)
	a1.Claimed([]domain.Task{pending("own")})
	a3.Claimed(nil)
	select {
	case ids := <-check.asked:
		t.Errorf("asked about %v after the task was leased", ids)
	case <-time.After(100 * time.Millisecond):
	}
	wokenOnly(t, "after the task was leased", all)
}

func TestHubTellsObserversOfEveryChange(t *testing.T) {
	hub := app.NewHub()
	var seen []string
	hub.Observe(func(t domain.Task) { seen = append(seen, t.ID+":"+string(t.Status)) })
	hub.Changed(domain.Task{ID: "a", Status: domain.StatusRunning})
	hub.Changed(domain.Task{ID: "b", Status: domain.StatusCompleted})
	if len(seen) != 2 || seen[0] != "a:running" || seen[1] != "b:completed" {
		t.Errorf("observer saw %v", seen)
	}
}
