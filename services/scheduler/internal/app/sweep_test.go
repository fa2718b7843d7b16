package app_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func (h *harness) sweep() app.SweepReport {
	h.t.Helper()
	rep, err := h.app.Sweep(h.ctx)
	if err != nil {
		h.t.Fatalf("sweep: %v", err)
	}
	return rep
}

func TestSweepReleasesTheLeasesOfALostAgent(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second })
	leased := h.create(user("t1"), spec("leased"))
	claimed := h.claimOne("a1", "m1", leased.ID)
	running := h.running("a1", "m1", spec("running"))
	other := h.running("a2", "m2", spec("other"))
	// a1 is an agent that heartbeats: its silence will make it lost.
	h.heartbeat("a1", claimed.AttemptID, running.AttemptID)
	h.clock.Advance(10 * time.Second)
	h.heartbeat("a2", other.AttemptID)
	h.clock.Advance(6 * time.Second)

	rep := h.sweep()
	if rep.AgentsLost != 1 || rep.LeasesExpired != 2 {
		t.Errorf("report = %+v, want one agent lost and two leases released", rep)
	}
	for _, id := range []string{leased.ID, running.ID} {
		got := h.get(id)
		e, ok := h.lastEvent(id).(domain.LeaseExpired)
		if got.Status != domain.StatusPending || !ok || e.Reason != domain.ReasonAgentLost || e.AgentID != "a1" {
			t.Errorf("task %s after its agent was lost: %s, last event %+v", id, got.Status, h.lastEvent(id))
		}
	}
	h.wantStatus(other.ID, domain.StatusRunning)
	if rep := h.sweep(); rep != (app.SweepReport{}) {
		t.Errorf("a second sweep did %+v", rep)
	}
}

// An agent that speaks only the lease protocol — claims, starts, renews
// at its renew_interval_sec, never sends SendHeartbeat — is never lost for
// its silence: its attempt ends when its lease runs out. Once it has
// heartbeated, its silence makes it lost as any agent's.
func TestSweepJudgesAnAgentWithoutHeartbeatsByItsLeases(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second })
	x := h.running("a1", "m1", spec("renewed every minute", func(in *domain.SpecInput) { in.MaxRetries = intp(0) }))
	h.clock.Advance(59 * time.Second)
	if rep := h.sweep(); rep.AgentsLost != 0 || rep.LeasesExpired != 0 {
		t.Fatalf("sweep a minute after the claim = %+v", rep)
	}
	if _, err := h.app.RenewLease(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, 0); err != nil {
		t.Fatalf("renew after a minute: %v", err)
	}
	h.wantStatus(x.ID, domain.StatusRunning)
	// Its lease (300 s) runs out: then it is released, as lease_expired.
	h.clock.Advance(301 * time.Second)
	if rep := h.sweep(); rep.AgentsLost != 0 || rep.LeasesExpired != 1 {
		t.Fatalf("sweep after the lease ran out = %+v", rep)
	}
	h.wantStatus(x.ID, domain.StatusFailed) // no retry left
	if e, ok := h.lastEvent(x.ID).(domain.LeaseExpired); !ok || e.Reason != domain.ReasonLeaseExpired {
		t.Fatalf("last event = %+v, want the lease expired", h.lastEvent(x.ID))
	}

	// The same agent heartbeats once: from then on its silence counts.
	y := h.running("a1", "m1", spec("heartbeated"))
	h.heartbeat("a1", y.AttemptID)
	h.clock.Advance(16 * time.Second)
	if rep := h.sweep(); rep.AgentsLost != 1 || rep.LeasesExpired != 1 {
		t.Fatalf("sweep 16 s after its heartbeat = %+v", rep)
	}
	if e, ok := h.lastEvent(y.ID).(domain.LeaseExpired); !ok || e.Reason != domain.ReasonAgentLost {
		t.Fatalf("last event = %+v, want the lease released as agent_lost", h.lastEvent(y.ID))
	}
}

func TestSweepReleasesExpiredLeases(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = time.Hour })
	ttl := func(in *domain.SpecInput) { in.LeaseTTL, in.RenewInterval = intp(10), intp(1) }
	expired := h.running("a1", "m1", spec("expired", ttl))
	renewed := h.running("a1", "m1", spec("renewed", ttl))
	h.clock.Advance(8 * time.Second)
	if _, err := h.app.RenewLease(h.ctx, agent("a1"), renewed.ID, "a1", renewed.AttemptID, 10); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(3 * time.Second)
	rep := h.sweep()
	if rep.LeasesExpired != 1 || rep.AgentsLost != 0 {
		t.Errorf("report = %+v", rep)
	}
	if e, ok := h.lastEvent(expired.ID).(domain.LeaseExpired); !ok || e.Reason != domain.ReasonLeaseExpired || e.RetryCount != 1 {
		t.Errorf("last event of the expired lease: %+v", h.lastEvent(expired.ID))
	}
	h.wantStatus(expired.ID, domain.StatusPending)
	h.wantStatus(renewed.ID, domain.StatusRunning)
}

func TestSweepFailsOverdueAttempts(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.TimeoutSlack, c.AgentLostAfter = 30*time.Second, time.Hour })
	x := h.running("a1", "m1", spec("slow", func(in *domain.SpecInput) {
		in.Timeout, in.GracePeriod, in.LeaseTTL, in.MaxRetries = intp(60), intp(10), intp(3600), intp(0)
	}))
	h.clock.Advance(100 * time.Second) // timeout + grace + slack
	if rep := h.sweep(); rep.TimedOut != 0 {
		t.Errorf("timed out at exactly timeout + grace + slack: %+v", rep)
	}
	h.clock.Advance(time.Second)
	if rep := h.sweep(); rep.TimedOut != 1 {
		t.Errorf("report = %+v", rep)
	}
	got := h.get(x.ID)
	if e, ok := h.lastEvent(x.ID).(domain.Failed); got.Status != domain.StatusFailed || !ok || e.Reason != domain.ReasonTimeout {
		t.Errorf("overdue task: %s, last event %+v", got.Status, h.lastEvent(x.ID))
	}
}

func TestSweepReleasesPreemptedTasks(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter, c.PreemptMaxWait = time.Hour, 10*time.Minute })
	victim := h.running("a1", "m1", spec("victim"))
	waiting := h.running("a1", "m1", spec("waiting"))
	preemptor := h.running("a2", "m2", spec("preemptor"))
	for _, id := range []string{victim.ID, waiting.ID} {
		if _, err := h.store.Mutate(h.ctx, id, func(t domain.Task) ([]domain.Record, error) {
			return t.Preempt(h.clock.Now(), preemptor.ID, "room")
		}); err != nil {
			t.Fatal(err)
		}
	}
	if rep := h.sweep(); rep.Requeued != 0 {
		t.Errorf("released while the preemptor runs: %+v", rep)
	}
	if _, err := h.app.CompleteTask(h.ctx, agent("a2"), preemptor.ID, app.Completion{AgentID: "a2", AttemptID: preemptor.AttemptID}); err != nil {
		t.Fatal(err)
	}
	if rep := h.sweep(); rep.Requeued != 2 {
		t.Errorf("report = %+v, want both released once the preemptor finished", rep)
	}
	h.wantStatus(victim.ID, domain.StatusPending)
	if e, ok := h.lastEvent(victim.ID).(domain.Requeued); !ok || e.Reason != "preemptor finished" {
		t.Errorf("last event %+v", h.lastEvent(victim.ID))
	}
}

func TestSweepRequeuesStrandedEvictions(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second }).withAdmission()
	h.admission.ClusterQueue = "cq1"
	x := h.create(user("t1"), spec("a", func(in *domain.SpecInput) { in.Queue, in.GracePeriod = "q", intp(5) }))
	if err := h.app.AdmitTask(h.ctx, x.ID, x.AdmissionEpoch, "cq1", nil); err != nil {
		t.Fatal(err)
	}
	y := h.claimOne("a1", "m1", x.ID)
	h.heartbeat("a1", y.AttemptID)
	if err := h.app.EvictTask(h.ctx, x.ID, x.AdmissionEpoch, "urgent", "quota"); err != nil {
		t.Fatal(err)
	}
	if rep := h.sweep(); rep.Requeued != 0 {
		t.Errorf("requeued before the agent could confirm the stop: %+v", rep)
	}
	h.clock.Advance(21 * time.Second) // grace 5 s + slack (AgentLostAfter) 15 s
	rep := h.sweep()
	if rep.Requeued != 1 {
		t.Errorf("report = %+v", rep)
	}
	if got := h.get(x.ID); got.Status != domain.StatusPending || !got.AwaitingAdmission() {
		t.Errorf("a stranded eviction: %+v, want back in its queue", got)
	}
}

func TestSweepCancelsTasksBlockedByAFailedDependency(t *testing.T) {
	h := newHarness(t)
	dep := h.create(user("t1"), spec("dep"))
	blocked := h.create(user("t1"), spec("blocked", func(in *domain.SpecInput) { in.DependsOn = []string{dep.ID} }))
	fine := h.create(user("t1"), spec("fine"))
	if rep := h.sweep(); rep.DependentsCancelled != 0 {
		t.Errorf("cancelled while the dependency is pending: %+v", rep)
	}
	if _, err := h.app.CancelTask(h.ctx, user("t1"), dep.ID, ""); err != nil {
		t.Fatal(err)
	}
	if rep := h.sweep(); rep.DependentsCancelled != 1 {
		t.Errorf("report = %+v", rep)
	}
	got := h.get(blocked.ID)
	if got.Status != domain.StatusCancelled || got.Error != "cancelled: dependency "+dep.ID+" did not complete" {
		t.Errorf("blocked task %s: %q", got.Status, got.Error)
	}
	h.wantStatus(fine.ID, domain.StatusPending)
}

func TestSweepPreemptsForWaitingHigherPriorityWork(t *testing.T) {
	h := newHarness(t, func(c *app.Config) {
		c.PreemptGap, c.PreemptAfter, c.AgentLostAfter = 3, 2*time.Second, time.Hour
	})
	low := h.running("a1", "m1", spec("low", func(in *domain.SpecInput) { in.Priority = intp(8) }))
	busy := app.Caller{Tenant: "*", AgentID: "a1"}
	if _, err := h.app.SendHeartbeat(h.ctx, busy, app.Heartbeat{AgentID: "a1", MachineID: "m1", AttemptIDs: []string{low.AttemptID}}); err != nil {
		t.Fatal(err) // no free slot
	}
	notEnough := h.create(user("t1"), spec("not-enough", func(in *domain.SpecInput) { in.Priority = intp(6) }))
	urgent := h.create(user("t1"), spec("urgent", func(in *domain.SpecInput) { in.Priority = intp(2) }))
	if rep := h.sweep(); rep.Preempted != 0 {
		t.Errorf("preempted before the urgent task waited PreemptAfter: %+v", rep)
	}
	h.clock.Advance(3 * time.Second)
	if rep := h.sweep(); rep.Preempted != 1 {
		t.Errorf("report = %+v", rep)
	}
	got := h.get(low.ID)
	if got.Status != domain.StatusPreempted || got.PreemptedBy != urgent.ID {
		t.Errorf("victim %+v", got)
	}
	h.wantStatus(notEnough.ID, domain.StatusPending)
	if stops := h.heartbeat("a1", low.AttemptID); len(stops) != 1 || stops[0].Reason != "preempted" {
		t.Errorf("the victim's agent was not told to stop: %+v", stops)
	}
}

func TestSweepWithoutPreemptionGapNeverPreempts(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.PreemptGap = 0 })
	h.sweep()
	if calls := h.store.CallsOf("PreemptionCandidates"); len(calls) != 0 {
		t.Errorf("preemption looked for candidates with the gap 0 (off): %v", calls)
	}
}

func TestSweepPrunesOldClaims(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.ClaimRetention, c.AgentLostAfter = time.Hour, 2*time.Hour })
	x := h.create(user("t1"), spec("a"))
	first, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", RequestID: "r1"})
	if err != nil || len(first) != 1 {
		t.Fatal(first, err)
	}
	if _, err := h.app.CancelTask(h.ctx, user("t1"), x.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.RetryTask(h.ctx, user("t1"), x.ID); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Hour + time.Second)
	h.sweep()
	again, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", RequestID: "r1"})
	if err != nil || len(again) != 1 || again[0].AttemptID == first[0].AttemptID || again[0].Status != domain.StatusAssigned {
		t.Errorf("a claim older than ClaimRetention still answered: %+v, %v", again, err)
	}
}

func TestSweepStopsAtAQueryThatFails(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.PreemptGap = 3 })
	boom := errors.New("db down")
	for _, q := range []string{"LostAgents", "ExpiredLeases", "Overdue", "ReleasablePreempted", "StrandedEvictions",
		"BlockedByFailure", "PreemptionCandidates", "PruneClaims"} {
		h.store.FailOn(q, boom)
		_, err := h.app.Sweep(h.ctx)
		wantErr(t, q+" failing", err, boom)
		h.store.FailOn(q, nil)
	}
}

func TestSweepGoesOnPastATaskThatFails(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = time.Hour })
	ttl := func(in *domain.SpecInput) { in.LeaseTTL, in.RenewInterval = intp(10), intp(1) }
	a := h.running("a1", "m1", spec("a", ttl))
	b := h.running("a1", "m1", spec("b", ttl))
	h.clock.Advance(11 * time.Second)
	h.store.FailOn("Mutate", errors.New("conflict"))
	if rep := h.sweep(); rep.LeasesExpired != 0 {
		t.Errorf("report = %+v", rep)
	}
	if n := len(h.store.CallsOf("Mutate")); n < 2 {
		t.Errorf("the sweep stopped at the first task that failed (%d mutations)", n)
	}
	h.store.FailOn("Mutate", nil)
	if rep := h.sweep(); rep.LeasesExpired != 2 {
		t.Errorf("the next sweep: %+v", rep)
	}
	h.wantStatus(a.ID, domain.StatusPending)
	h.wantStatus(b.ID, domain.StatusPending)
}

func TestRunSweeperSweepsOnlyWhileItHoldsTheLock(t *testing.T) {
	h := newHarness(t)
	other, ok, err := h.store.TryLock(h.ctx)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.app.RunSweeper(ctx, time.Millisecond) }()
	waitFor(t, "a second try for the lock", func() bool { return len(h.store.CallsOf("TryLock")) >= 3 })
	if n := len(h.store.CallsOf("LostAgents")); n != 0 {
		t.Errorf("swept %d times without the lock", n)
	}
	other.Release()
	waitFor(t, "a sweep once the lock is free", func() bool { return len(h.store.CallsOf("LostAgents")) >= 2 })
	// The lock's session dies: the sweeper lets go and takes it anew.
	before := len(h.store.CallsOf("TryLock"))
	h.store.LoseLock(errors.New("session gone"))
	waitFor(t, "the lock taken again", func() bool { return len(h.store.CallsOf("TryLock")) > before })
	cancel()
	<-done
	// Releases: the other holder's, then the sweeper's after losing the
	// lock and when stopped.
	if n := len(h.store.CallsOf("Release")); n < 3 {
		t.Errorf("the lock was released %d times, want at least 3", n)
	}
	if _, ok, _ := h.store.TryLock(h.ctx); !ok {
		t.Error("the lock is still held after the sweeper stopped")
	}
}

// waitFor polls cond until it holds (or fails the test after 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// sweepFor runs the sweeper (1 ms interval) until the test ends.
func (h *harness) sweepFor(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.app.RunSweeper(ctx, time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
}

// takeOver runs the sweeper, as a replica that takes the sweeper's lock,
// and waits for its first sweeps.
func (h *harness) takeOver(t *testing.T) {
	t.Helper()
	h.sweepFor(t)
	waitFor(t, "the first sweeps", func() bool { return len(h.store.CallsOf("LostAgents")) >= 3 })
}

// silentFor starts a task on agentID, which heartbeats once, then lets d
// pass with no scheduler sweeping.
func (h *harness) silentFor(agentID, name string, d time.Duration) domain.Task {
	h.t.Helper()
	task := h.running(agentID, "m-"+agentID, spec(name))
	h.heartbeat(agentID, task.AttemptID)
	h.clock.Advance(d)
	return task
}

// sweepsAfterAdvancing moves the clock on by d and waits for three sweeps
// that saw the new time.
func (h *harness) sweepsAfterAdvancing(t *testing.T, d time.Duration) {
	t.Helper()
	h.clock.Advance(d)
	before := len(h.store.CallsOf("LostAgents"))
	waitFor(t, fmt.Sprintf("sweeps %v later", d), func() bool { return len(h.store.CallsOf("LostAgents")) >= before+3 })
}

// While no replica sweeps (every scheduler down), agents' heartbeats are
// refused, not silent. A replica that takes the sweeper's lock declares no
// agent lost until AgentLostAfter has passed since it first heard from any
// agent: an agent back within it keeps its work, and what it finished
// meanwhile is accepted; one that stays silent is lost after that.
func TestSweeperGivesAgentsTheirTimeAgainAfterTakingOver(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second })
	finished := h.silentFor("a1", "finished during the outage", 0)
	// No scheduler for 30 s: both deadlines pass unseen.
	silent := h.silentFor("a2", "its agent never comes back", 30*time.Second)

	h.takeOver(t)
	h.sweepsAfterAdvancing(t, 10*time.Second)
	h.wantStatus(finished.ID, domain.StatusRunning)
	h.wantStatus(silent.ID, domain.StatusRunning)

	// a1 is back 10 s after the takeover: its heartbeat, then the
	// completion it kept.
	h.heartbeat("a1", finished.AttemptID)
	if _, err := h.app.CompleteTask(h.ctx, agent("a1"), finished.ID, app.Completion{AgentID: "a1", AttemptID: finished.AttemptID}); err != nil {
		t.Fatalf("the completion of an attempt that finished while no scheduler ran: %v", err)
	}
	h.wantStatus(finished.ID, domain.StatusCompleted)

	// 16 s after the takeover but 6 s after a1 was heard from: a2's
	// silence does not count yet.
	h.sweepsAfterAdvancing(t, 6*time.Second)
	h.wantStatus(silent.ID, domain.StatusRunning)

	// Past 15 s after a1 was heard from, it does.
	h.clock.Advance(10 * time.Second)
	waitFor(t, "a2 lost", func() bool { return h.get(silent.ID).Status == domain.StatusPending })
	if e, ok := h.lastEvent(silent.ID).(domain.LeaseExpired); !ok || e.Reason != domain.ReasonAgentLost {
		t.Errorf("last event of a2's task = %+v, want its lease expired as agent_lost", h.lastEvent(silent.ID))
	}
}

// When no agent is heard from after a takeover (every agent gone with the
// schedulers), their silence counts lostGraceLimit (4) × AgentLostAfter
// after it.
func TestSweeperJudgesAgentsNeverHeardFromAfterABoundedWait(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second })
	silent := h.silentFor("a1", "its agent never comes back", 30*time.Second)

	h.takeOver(t)
	h.sweepsAfterAdvancing(t, 59*time.Second)
	h.wantStatus(silent.ID, domain.StatusRunning)
	h.clock.Advance(2 * time.Second)
	waitFor(t, "a1 lost a minute after the takeover", func() bool { return h.get(silent.ID).Status == domain.StatusPending })
}

// The question whether an agent was heard from failing stops the sweep
// (the next one asks again) and finds no agent lost.
func TestSweeperThatCannotTellWhetherAgentsWereHeardFromLosesNone(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second })
	silent := h.silentFor("a1", "silent", 30*time.Second)
	h.store.FailOn("LatestHeartbeat", errors.New("db down"))

	h.sweepFor(t)
	waitFor(t, "sweeps asking", func() bool { return len(h.store.CallsOf("LatestHeartbeat")) >= 3 })
	if n := len(h.store.CallsOf("LostAgents")); n != 0 {
		t.Errorf("%d sweeps judged agents without knowing whether any was heard from", n)
	}
	h.wantStatus(silent.ID, domain.StatusRunning)
}
