package app_test

import (
	"testing"

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
