package app_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func (h *harness) heartbeat(agentID string, attempts ...string) []app.Stop {
	h.t.Helper()
	answer, err := h.app.SendHeartbeat(h.ctx, agent(agentID), app.Heartbeat{AgentID: agentID, MachineID: "m-" + agentID,
		Labels: []string{"gpu"}, AttemptIDs: attempts, FreeSlots: 1})
	if err != nil {
		h.t.Fatalf("heartbeat: %v", err)
	}
	return answer.Stops
}

func TestHeartbeatRecordsTheAgent(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 15 * time.Second })
	if stops := h.heartbeat("a1"); len(stops) != 0 {
		t.Errorf("stops = %+v", stops)
	}
	a, lost, known := h.store.AgentOf("a1")
	if !known || lost || a.MachineID != "m-a1" || a.TenantID != "" || a.IP != "10.0.1.1" || a.FreeSlots != 1 ||
		!slices.Equal(a.Labels, []string{"gpu"}) || !a.LastHeartbeatAt.Equal(h.clock.Now()) ||
		!a.LostAfter.Equal(h.clock.Now().Add(15*time.Second)) {
		t.Errorf("agent = %+v (lost %v, known %v)", a, lost, known)
	}
	if got := h.app.NextHeartbeatBefore(); !got.Equal(h.clock.Now().Add(15 * time.Second)) {
		t.Errorf("next heartbeat before %s", got)
	}
	tenantAgent := app.Caller{Tenant: "t1", Subject: "agent:a2", AgentID: "a2"}
	if _, err := h.app.SendHeartbeat(h.ctx, tenantAgent, app.Heartbeat{AgentID: "a2", MachineID: "m2"}); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := h.store.AgentOf("a2"); a.TenantID != "t1" {
		t.Errorf("a tenant's agent serves %q", a.TenantID)
	}
	_, err := h.app.SendHeartbeat(h.ctx, agent("a1"), app.Heartbeat{AgentID: "a3"})
	wantErr(t, "heartbeat as another agent", err, app.ErrForbidden)
	boom := errors.New("db down")
	h.store.FailOn("Heartbeat", boom)
	_, err = h.app.SendHeartbeat(h.ctx, agent("a1"), app.Heartbeat{AgentID: "a1"})
	wantErr(t, "heartbeat the store refused", err, boom)
}

func TestHeartbeatTellsWhichAttemptsToStop(t *testing.T) {
	h := newHarness(t)
	keep := h.running("a1", "m-a1", spec("keep"))
	cancelled := h.running("a1", "m-a1", spec("cancelled", func(in *domain.SpecInput) { in.GracePeriod = intp(7) }))
	preempted := h.running("a1", "m-a1", spec("preempted"))
	moved := h.running("a1", "m-a1", spec("moved"))
	if _, err := h.app.CancelTask(h.ctx, user("t1"), cancelled.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Mutate(h.ctx, preempted.ID, func(t domain.Task) ([]domain.Record, error) {
		return t.Preempt(h.clock.Now(), "x", "room")
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Mutate(h.ctx, moved.ID, func(t domain.Task) ([]domain.Record, error) {
		return t.ExpireLease(h.clock.Now(), domain.ReasonLeaseExpired)
	}); err != nil {
		t.Fatal(err)
	}
	stops := h.heartbeat("a1", keep.AttemptID, cancelled.AttemptID, preempted.AttemptID, moved.AttemptID, "unknown")
	want := []app.Stop{
		{TaskID: cancelled.ID, AttemptID: cancelled.AttemptID, Reason: "cancelled", GracePeriodSec: 7},
		{TaskID: preempted.ID, AttemptID: preempted.AttemptID, Reason: "preempted", GracePeriodSec: domain.DefaultGracePeriod},
		{AttemptID: moved.AttemptID, Reason: "lease_lost", GracePeriodSec: domain.DefaultGracePeriod},
		{AttemptID: "unknown", Reason: "lease_lost", GracePeriodSec: domain.DefaultGracePeriod},
	}
	if !slices.Equal(stops, want) {
		t.Errorf("stops = %+v\nwant    %+v", stops, want)
	}
}

func TestHeartbeatRequeuesWorkEvictedForQuotaOnceStopped(t *testing.T) {
	h := newHarness(t).withAdmission()
	h.admission.ClusterQueue = "cq1"
	evict := func(id string) domain.Task {
		t.Helper()
		x := h.get(id)
		if err := h.app.AdmitTask(h.ctx, id, x.AdmissionEpoch, "cq1", nil); err != nil {
			t.Fatal(err)
		}
		x = h.claimOne("a1", "m-a1", id)
		if err := h.app.EvictTask(h.ctx, id, x.AdmissionEpoch, "urgent", "quota"); err != nil {
			t.Fatal(err)
		}
		return x
	}
	stopped := evict(h.create(user("t1"), spec("stopped", func(in *domain.SpecInput) { in.Queue = "q" })).ID)
	stillRunning := evict(h.create(user("t1"), spec("still", func(in *domain.SpecInput) { in.Queue = "q" })).ID)
	stops := h.heartbeat("a1", stillRunning.AttemptID)
	if len(stops) != 1 || stops[0].Reason != "preempted" {
		t.Errorf("stops = %+v", stops)
	}
	if got := h.get(stopped.ID); got.Status != domain.StatusPending || !got.AwaitingAdmission() {
		t.Errorf("an evicted task its agent stopped: %+v, want pending in its queue again", got)
	}
	if _, ok := h.lastEvent(stopped.ID).(domain.Requeued); !ok {
		t.Errorf("last event %T", h.lastEvent(stopped.ID))
	}
	h.wantStatus(stillRunning.ID, domain.StatusPreempted)
	h.heartbeat("a1")
	h.wantStatus(stillRunning.ID, domain.StatusPending)
}

// A claim's answer lost on its way (the agent killed with its long poll
// open) leaves a task assigned to an agent that lives on without it. Its
// heartbeats, which list every attempt it holds, give the task back once
// two AgentLostAfter have passed since the lease, without using a retry;
// attempts it holds and attempts it runs stay.
func TestHeartbeatReleasesAssignedTasksTheAgentDoesNotHold(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.AgentLostAfter = 10 * time.Second })
	lost := h.claimOne("a1", "m1", h.create(user("t1"), spec("answer lost")).ID)
	held := h.claimOne("a1", "m1", h.create(user("t1"), spec("answer received")).ID)
	running := h.running("a1", "m1", spec("running"))
	other := h.claimOne("a2", "m2", h.create(user("t1"), spec("another agent's")).ID)

	// Within the margin the answer may still be on its way.
	h.clock.Advance(19 * time.Second)
	h.heartbeat("a1", held.AttemptID)
	h.wantStatus(lost.ID, domain.StatusAssigned)

	h.clock.Advance(2 * time.Second)
	if stops := h.heartbeat("a1", held.AttemptID); len(stops) != 0 {
		t.Errorf("stops = %+v, want none", stops)
	}
	got := h.get(lost.ID)
	e, ok := h.lastEvent(lost.ID).(domain.LeaseExpired)
	if got.Status != domain.StatusPending || !ok || e.Reason != domain.ReasonAgentLost || e.AttemptID != lost.AttemptID || e.RetryCount != 0 {
		t.Errorf("unheld task: %s, last event %+v; want pending again, its lease released without a retry", got.Status, h.lastEvent(lost.ID))
	}
	h.wantStatus(held.ID, domain.StatusAssigned)
	h.wantStatus(running.ID, domain.StatusRunning)
	h.wantStatus(other.ID, domain.StatusAssigned)

	// The task is claimable again, by any agent.
	h.claimOne("a2", "m2", lost.ID)
}
