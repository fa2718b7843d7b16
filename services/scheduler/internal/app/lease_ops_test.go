package app_test

import (
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// The agent calls are fenced by attempt: another attempt is 30001
// (domain.ErrAttemptMismatch), a task that is final or no longer leased is
// 30002 (domain.ErrImmutable), a lease that ran out is 30003
// (domain.ErrLeaseExpired), for renew and progress also after the task
// was taken back. A refused call changes nothing.

// leased is a task claimed by a1 on m1 whose lease lasts ttl seconds.
func (h *harness) leased(ttl int) domain.Task {
	h.t.Helper()
	x := h.create(user("t1"), spec("a", func(in *domain.SpecInput) { in.LeaseTTL, in.RenewInterval = intp(ttl), intp(1) }))
	return h.claimOne("a1", "m1", x.ID)
}

func TestStartRenewProgressOfTheCurrentAttempt(t *testing.T) {
	h := newHarness(t)
	x := h.leased(30)
	a1 := agent("a1")
	h.clock.Advance(5 * time.Second)
	started, err := h.app.StartTask(h.ctx, a1, x.ID, "a1", x.AttemptID)
	if err != nil || started.Status != domain.StatusRunning || !started.StartedAt.Equal(h.clock.Now()) ||
		!started.LeaseExpiresAt.Equal(h.clock.Now().Add(30*time.Second)) {
		t.Fatalf("start = %+v, %v", started, err)
	}
	again, err := h.app.StartTask(h.ctx, a1, x.ID, "a1", x.AttemptID)
	if err != nil || again.Version != started.Version {
		t.Errorf("a repeated start = %+v, %v; want the same task and nothing recorded", again, err)
	}
	renewed, err := h.app.RenewLease(h.ctx, a1, x.ID, "a1", x.AttemptID, 120)
	if err != nil || !renewed.LeaseExpiresAt.Equal(h.clock.Now().Add(120*time.Second)) {
		t.Errorf("renew = %+v, %v", renewed, err)
	}
	progressed, err := h.app.ReportProgress(h.ctx, a1, x.ID, "a1", x.AttemptID, 42, "loading")
	if err != nil || progressed.Progress != 42 || progressed.ProgressMessage != "loading" {
		t.Errorf("progress = %+v, %v", progressed, err)
	}
	if names := h.eventNames(x.ID); names != "[TaskSubmitted TaskLeased TaskStarted TaskLeaseRenewed TaskProgressed]" {
		t.Errorf("events = %s", names)
	}
}

func TestAgentCallsAreFencedByAttempt(t *testing.T) {
	h := newHarness(t)
	x := h.leased(30)
	a1 := agent("a1")
	calls := []struct {
		name string
		call func(attempt string) error
	}{
		{"start", func(att string) error { _, err := h.app.StartTask(h.ctx, a1, x.ID, "a1", att); return err }},
		{"renew", func(att string) error { _, err := h.app.RenewLease(h.ctx, a1, x.ID, "a1", att, 0); return err }},
		{"progress", func(att string) error { _, err := h.app.ReportProgress(h.ctx, a1, x.ID, "a1", att, 1, ""); return err }},
		{"complete", func(att string) error {
			_, err := h.app.CompleteTask(h.ctx, a1, x.ID, app.Completion{AgentID: "a1", AttemptID: att})
			return err
		}},
	}
	before := h.get(x.ID).Version
	for _, c := range calls {
		wantErr(t, c.name+" by another attempt (30001)", c.call("not-the-attempt"), domain.ErrAttemptMismatch)
	}
	if h.get(x.ID).Version != before {
		t.Error("a fenced call changed the task")
	}

	// The lease runs out: renew and progress are 30003 until the sweeper
	// takes the task back.
	h.clock.Advance(31 * time.Second)
	wantErr(t, "renew after the lease ended (30003)", calls[1].call(x.AttemptID), domain.ErrLeaseExpired)
	wantErr(t, "progress after the lease ended (30003)", calls[2].call(x.AttemptID), domain.ErrLeaseExpired)
	wantErr(t, "start after the lease ended (30003)", calls[0].call(x.AttemptID), domain.ErrLeaseExpired)
	if _, err := h.app.Sweep(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.wantStatus(x.ID, domain.StatusPending)
	// Taken back: renew and progress still say why (30003); start and
	// complete are by an attempt that is not the current one (30001).
	want := map[string]error{"start": domain.ErrAttemptMismatch, "renew": domain.ErrLeaseExpired,
		"progress": domain.ErrLeaseExpired, "complete": domain.ErrAttemptMismatch}
	for _, c := range calls {
		wantErr(t, c.name+" after the task was taken back", c.call(x.AttemptID), want[c.name])
	}
	// Another attempt holds it now: the previous one can never complete it,
	// and its renewals stay 30003.
	y := h.claimOne("a2", "m2", x.ID)
	for _, c := range calls {
		wantErr(t, c.name+" by the old attempt after another took the task", c.call(x.AttemptID), want[c.name])
	}
	if got := h.get(x.ID); got.AttemptID != y.AttemptID || got.Status != domain.StatusAssigned {
		t.Errorf("the new attempt lost the task: %+v", got)
	}
}

func TestAgentCallsOnAFinalTaskAreImmutable(t *testing.T) {
	h := newHarness(t)
	x := h.leased(30)
	if _, err := h.app.CancelTask(h.ctx, user("t1"), x.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	a1 := agent("a1")
	_, err := h.app.StartTask(h.ctx, a1, x.ID, "a1", x.AttemptID)
	wantErr(t, "start of a cancelled task (30002)", err, domain.ErrImmutable)
	_, err = h.app.RenewLease(h.ctx, a1, x.ID, "a1", x.AttemptID, 0)
	wantErr(t, "renew of a cancelled task (30002)", err, domain.ErrImmutable)
	_, err = h.app.CompleteTask(h.ctx, a1, x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID})
	wantErr(t, "complete of a cancelled task (30002)", err, domain.ErrImmutable)
	h.wantStatus(x.ID, domain.StatusCancelled)
}

func TestAgentCallsForAnotherAgentOrTenant(t *testing.T) {
	h := newHarness(t)
	x := h.leased(30)
	_, err := h.app.StartTask(h.ctx, agent("a2"), x.ID, "a1", x.AttemptID)
	wantErr(t, "start as a1 with a2's token", err, app.ErrForbidden)
	_, err = h.app.RenewLease(h.ctx, agent("a2"), x.ID, "a1", x.AttemptID, 0)
	wantErr(t, "renew as a1 with a2's token", err, app.ErrForbidden)
	_, err = h.app.ReportProgress(h.ctx, agent("a2"), x.ID, "a1", x.AttemptID, 5, "")
	wantErr(t, "progress as a1 with a2's token", err, app.ErrForbidden)
	_, err = h.app.CompleteTask(h.ctx, agent("a2"), x.ID, app.Completion{AgentID: "a1", AttemptID: x.AttemptID})
	wantErr(t, "complete as a1 with a2's token", err, app.ErrForbidden)
	t2Agent := app.Caller{Tenant: "t2", Subject: "agent:a1", AgentID: "a1"}
	_, err = h.app.StartTask(h.ctx, t2Agent, x.ID, "a1", x.AttemptID)
	wantErr(t, "start by an agent of another tenant", err, domain.ErrNotFound)
	_, err = h.app.StartTask(h.ctx, agent("a1"), "no-such-task", "a1", x.AttemptID)
	wantErr(t, "start of an unknown task (30004)", err, domain.ErrNotFound)
	if h.get(x.ID).Status != domain.StatusAssigned {
		t.Error("a refused call changed the task")
	}
}

func TestProgressOutOfRangeIsInvalid(t *testing.T) {
	h := newHarness(t)
	x := h.leased(30)
	_, err := h.app.ReportProgress(h.ctx, agent("a1"), x.ID, "a1", x.AttemptID, 101, "")
	wantInvalid(t, "progress 101", err, "progress")
}
