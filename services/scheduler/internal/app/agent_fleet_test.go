package app_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

func TestDrainedAgentClaimsNothingAndKeepsItsRepeatedClaim(t *testing.T) {
	h := newHarness(t)
	first := h.create(user("t1"), spec("first"))
	// a1 claims with a request id, then is drained.
	got, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", RequestID: "r1", Limit: 1})
	if err != nil || len(got) != 1 || got[0].ID != first.ID {
		t.Fatalf("claim before the drain = %v, %v", taskIDs(got), err)
	}
	if _, err := h.app.SetDrain(h.ctx, admin, "a1", true); err != nil {
		t.Fatal(err)
	}
	if answer, err := h.app.SendHeartbeat(h.ctx, agent("a1"), app.Heartbeat{AgentID: "a1", MachineID: "m1"}); err != nil || !answer.Drained {
		t.Errorf("a1's heartbeat after the drain = %+v, %v; want drained", answer, err)
	}
	second := h.create(user("t1"), spec("second"))
	if ts := h.claim("a1", "m1", 5); len(ts) != 0 {
		t.Errorf("a drained agent claimed %v", taskIDs(ts))
	}
	// A repeated claim (its answer was lost) still gets its tasks.
	again, _, err := h.app.ClaimTasks(h.ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", RequestID: "r1", Limit: 1})
	if err != nil || len(again) != 1 || again[0].ID != first.ID {
		t.Errorf("repeated claim of a drained agent = %v, %v; want %s", taskIDs(again), err, first.ID)
	}
	// What it runs goes on: start and complete are accepted.
	if _, err := h.app.StartTask(h.ctx, agent("a1"), first.ID, "a1", again[0].AttemptID); err != nil {
		t.Errorf("start by a drained agent: %v", err)
	}
	// Other agents still claim.
	h.claimOne("a2", "m2", second.ID)
	if _, err := h.app.SetDrain(h.ctx, admin, "a1", false); err != nil {
		t.Fatal(err)
	}
	if answer, err := h.app.SendHeartbeat(h.ctx, agent("a1"), app.Heartbeat{AgentID: "a1", MachineID: "m1"}); err != nil || answer.Drained {
		t.Errorf("a1's heartbeat after the undrain = %+v, %v; want not drained", answer, err)
	}
	third := h.create(user("t1"), spec("third"))
	h.claimOne("a1", "m1", third.ID)
}

func TestDrainedClaimWaitsInsteadOfSpinning(t *testing.T) {
	h := newHarness(t, func(c *app.Config) { c.ClaimRecheck = 20 * time.Millisecond })
	h.create(user("t1"), spec("work"))
	if _, err := h.app.SetDrain(h.ctx, admin, "a1", true); err != nil {
		t.Fatal(err)
	}
	// The clock does not move: the wait ends by the context, after some
	// rechecks, with nothing leased.
	ctx, cancel := context.WithTimeout(h.ctx, 200*time.Millisecond)
	defer cancel()
	ts, _, err := h.app.ClaimTasks(ctx, agent("a1"), app.ClaimRequest{AgentID: "a1", MachineID: "m1", Wait: time.Minute})
	if err != nil || len(ts) != 0 {
		t.Fatalf("long poll of a drained agent = %v, %v", taskIDs(ts), err)
	}
	if n := len(h.store.CallsOf("Drained")); n < 2 || n > 50 {
		t.Errorf("the drained long poll checked %d times in 200 ms with a 20 ms recheck", n)
	}
}

func TestFleetIsForOperators(t *testing.T) {
	h := newHarness(t)
	for _, c := range []app.Caller{user("t1"), agent("a1")} {
		_, err := h.app.ListFleet(h.ctx, c, nil)
		wantErr(t, "ListFleet by "+c.Subject, err, app.ErrForbidden)
		_, err = h.app.SetDrain(h.ctx, c, "a1", true)
		wantErr(t, "SetDrain by "+c.Subject, err, app.ErrForbidden)
	}
	if answer, err := h.app.SendHeartbeat(h.ctx, agent("a1"), app.Heartbeat{AgentID: "a1", MachineID: "m1"}); err != nil || answer.Drained {
		t.Errorf("a1 drained by a refused call: %+v, %v", answer, err)
	}
}

func TestHeartbeatDescribesTheAgentAndClaimsKeepIt(t *testing.T) {
	h := newHarness(t)
	if _, err := h.app.SendHeartbeat(h.ctx, agent("a1"), app.Heartbeat{AgentID: "a1", MachineID: "m1", Labels: []string{"gpu"},
		FreeSlots: 4, Slots: 4, Version: "1.2.3", Isolation: "rlimit", Warnings: []string{"no cgroups"}}); err != nil {
		t.Fatal(err)
	}
	x := h.create(user("t1"), spec("x"))
	h.clock.Advance(time.Second)
	h.claimOne("a1", "m1", x.ID, "gpu")
	fleet, err := h.app.ListFleet(h.ctx, admin, nil)
	if err != nil || len(fleet) != 1 {
		t.Fatalf("fleet = %+v, %v", fleet, err)
	}
	f := fleet[0]
	if f.Version != "1.2.3" || f.Slots != 4 || f.Isolation != "rlimit" || !slices.Equal(f.Warnings, []string{"no cgroups"}) ||
		!f.LastHeartbeatAt.Equal(h.clock.Now()) || !slices.Equal(f.RunningTaskIDs, []string{x.ID}) || f.IP != "10.0.1.1" {
		t.Errorf("a1 in the fleet = %+v", f)
	}
}
