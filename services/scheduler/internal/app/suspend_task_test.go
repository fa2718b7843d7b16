package app_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestSuspendAndResumeTask(t *testing.T) {
	h := newHarness(t)
	pending := h.create(user("t1"), spec("pending"))
	got, err := h.app.SuspendTask(h.ctx, user("t1"), pending.ID, "maintenance")
	if err != nil || got.Status != domain.StatusSuspended {
		t.Fatalf("suspend of a pending task = %+v, %v", got, err)
	}
	// A held task is never claimed.
	if claimed := h.claim("a1", "m1", 5); len(claimed) != 0 {
		t.Fatalf("claimed a suspended task: %+v", claimed)
	}
	_, err = h.app.SuspendTask(h.ctx, user("t1"), pending.ID, "")
	wantErr(t, "suspend of a suspended task (30002)", err, domain.ErrImmutable)
	_, err = h.app.ResumeTask(h.ctx, user("t2"), pending.ID)
	wantErr(t, "resume of another tenant's task (30004)", err, domain.ErrNotFound)
	h.wantStatus(pending.ID, domain.StatusSuspended)
	if got, err = h.app.ResumeTask(h.ctx, user("t1"), pending.ID); err != nil || got.Status != domain.StatusPending {
		t.Fatalf("resume = %+v, %v", got, err)
	}
	if claimed := h.claim("a1", "m1", 5); len(claimed) != 1 || claimed[0].ID != pending.ID {
		t.Fatalf("the resumed task is not claimable: %+v", claimed)
	}
	_, err = h.app.ResumeTask(h.ctx, user("t1"), pending.ID)
	wantErr(t, "resume of an assigned task (30002)", err, domain.ErrImmutable)

	// A running attempt is told to stop at its agent's next heartbeat.
	x := h.running("a2", "m2", spec("running"))
	_, err = h.app.SuspendTask(h.ctx, user("t2"), x.ID, "")
	wantErr(t, "suspend of another tenant's task (30004)", err, domain.ErrNotFound)
	if _, err := h.app.SuspendTask(h.ctx, user("t1"), x.ID, "maintenance"); err != nil {
		t.Fatal(err)
	}
	answer, err := h.app.SendHeartbeat(h.ctx, agent("a2"), app.Heartbeat{AgentID: "a2", MachineID: "m2", AttemptIDs: []string{x.AttemptID}})
	stops := answer.Stops
	if err != nil || len(stops) != 1 || stops[0].Reason != "suspended" || stops[0].TaskID != x.ID {
		t.Errorf("stops after a suspend = %+v, %v", stops, err)
	}
	if e, ok := h.lastEvent(x.ID).(domain.Suspended); !ok || e.AttemptID != x.AttemptID || e.Reason != "maintenance" {
		t.Errorf("last event %+v", h.lastEvent(x.ID))
	}

	done := h.create(user("t1"), spec("done"))
	if _, err := h.app.CancelTask(h.ctx, user("t1"), done.ID, ""); err != nil {
		t.Fatal(err)
	}
	_, err = h.app.SuspendTask(h.ctx, user("t1"), done.ID, "")
	wantErr(t, "suspend of a final task (30002)", err, domain.ErrImmutable)
}
