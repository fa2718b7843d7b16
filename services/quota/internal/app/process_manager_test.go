package app_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

var rayName = capacity.RayName("acme", "c1")

// Production, step by step: every step is recorded once, and a pass with
// nothing new to observe changes nothing and applies nothing again.
func TestProductionSteps(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)

	// Apply the Ray cluster, then (its resource accepted) the WorkGroup.
	wantEvents(t, "pass 1", f.pass(), "ray/acme/c1 RayClusterApplied", "workgroup/q-2 WorkGroupApplied")
	wantCalls := []string{"ApplyRayCluster " + rayName, "RayClusterStatus " + rayName, "ApplyWorkGroup wg-q-2", "WorkGroupStatus wg-q-2"}
	if got := f.op.Calls(); !slices.Equal(got, wantCalls) {
		t.Errorf("pass 1 asked the operator %q, want %q", got, wantCalls)
	}
	if spec, ok := f.op.WorkGroup("wg-q-2"); !ok || spec.QuotaID != "q-2" || spec.GPUs != 4 || spec.Generation != 1 ||
		spec.RayCluster != rayName || spec.Quota.Name != "gu1-default" {
		t.Errorf("applied WorkGroup spec = %+v, want q-2's generation 1 with 4 GPUs on %s", spec, rayName)
	}

	// Nothing observed yet: nothing recorded, nothing applied again.
	wantEvents(t, "a pass while both are pending", f.pass())
	if n, m := f.op.Count("ApplyRayCluster"), f.op.Count("ApplyWorkGroup"); n != 1 || m != 1 {
		t.Errorf("resources applied %d and %d times, want once each", n, m)
	}

	// A WorkGroup counts as Running only once its Ray cluster was seen
	// Running, whichever the operator reports first.
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseRunning, "")
	wantEvents(t, "the WorkGroup running before its Ray cluster", f.pass())

	f.op.SetRayPhase(rayName, capacity.PhaseRunning, "")
	wantEvents(t, "the Ray cluster running", f.pass(),
		"ray/acme/c1 RayClusterRunning", "workgroup/q-2 WorkGroupRunning", "quota/q-2 QuotaProduced", "quota/q-1 QuotaProduced")
	if r, _ := f.app.GetRayCluster(f.ctx, admin, "acme", "c1"); r.Endpoint != "ray://"+rayName {
		t.Errorf("Ray cluster endpoint = %q, want the operator's", r.Endpoint)
	}
	if v := f.quota("q-1"); v.Quota.Status != capacity.QuotaActive || v.Children[0].WorkGroup.Status != capacity.StatusRunning {
		t.Errorf("after production: %s with WorkGroup %s, want Active and Running", v.Quota.Status, v.Children[0].WorkGroup.Status)
	}

	// Settled: a pass finds no work and asks the operator nothing.
	calls := len(f.op.Calls())
	wantEvents(t, "a pass after production", f.pass())
	if extra := f.op.Calls()[calls:]; len(extra) != 0 {
		t.Errorf("a pass after production asked the operator %q", extra)
	}
	for _, c := range f.store.Committed()[len(f.store.Committed())-4:] {
		if c.Actor != app.ServiceActor {
			t.Errorf("%s recorded by %+v, want %+v", c.Event.Aggregate, c.Actor, app.ServiceActor)
		}
	}
}

// Unsubscription, step by step: delete the WorkGroup, record it gone, then
// delete the quotas and give the root's inventory back; again, nothing.
func TestUnsubscriptionSteps(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.produce()
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", "done"); err != nil {
		t.Fatal(err)
	}
	calls := len(f.op.Calls())
	wantEvents(t, "the unsubscription pass", f.pass(), "workgroup/q-2 WorkGroupDeleted",
		"quota/q-1 QuotaDeleted", "quota/q-2 QuotaDeleted", "quota/q-3 QuotaDeleted", "cluster/c1 InventoryReleased")
	if got, want := f.op.Calls()[calls:], []string{"DeleteWorkGroup wg-q-2", "WorkGroupStatus wg-q-2"}; !slices.Equal(got, want) {
		t.Errorf("the pass asked the operator %q, want %q", got, want)
	}
	if cl, _ := f.app.GetCluster(f.ctx, admin, "c1"); cl.Inventory["A100"].Allocated != 0 {
		t.Errorf("%d GPUs still reserved after unsubscription", cl.Inventory["A100"].Allocated)
	}
	calls = len(f.op.Calls())
	wantEvents(t, "a pass after unsubscription", f.pass())
	if extra := f.op.Calls()[calls:]; len(extra) != 0 {
		t.Errorf("a pass after unsubscription asked the operator %q", extra)
	}
}

// A WorkGroup the operator still reports after the deletion was asked for
// keeps the unsubscription waiting; the deletion is asked for again.
func TestUnsubscriptionWaitsForTheWorkGroupToGo(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.produce()
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", ""); err != nil {
		t.Fatal(err)
	}
	f.op.Fail("DeleteWorkGroup", errors.New("apiserver unavailable"))
	mark := len(f.store.Events(0))
	if err := f.pm.Pass(f.ctx); err == nil || !strings.Contains(err.Error(), "apiserver unavailable") {
		t.Fatalf("pass with a failing deletion: %v", err)
	}
	wantEvents(t, "the failed deletion", eventNames(f.store.Events(mark)))
	if v := f.quota("q-1"); v.Quota.Status != capacity.QuotaUnsubscribing {
		t.Errorf("q-1 is %s while its WorkGroup exists, want Unsubscribing", v.Quota.Status)
	}
	f.op.Fail("DeleteWorkGroup", nil)
	if got := f.pass(); len(got) == 0 || got[0] != "workgroup/q-2 WorkGroupDeleted" {
		t.Errorf("the retry recorded %q, want the WorkGroup deleted first", got)
	}
	if n := f.op.Count("DeleteWorkGroup"); n != 2 {
		t.Errorf("deletion asked %d times, want 2", n)
	}
}

// A refused Ray cluster fails it, its WorkGroup and the quotas waiting for
// them, with the operator's reason; the failure is recorded once.
func TestOperatorRejectsTheRayCluster(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.op.Reject(rayName, "no RayCluster definition")
	wantEvents(t, "the refused Ray cluster", f.pass(), "ray/acme/c1 RayClusterFailed", "workgroup/q-2 WorkGroupFailed",
		"quota/q-2 QuotaProductionFailed", "quota/q-1 QuotaProductionFailed")
	v := f.quota("q-1")
	if v.Quota.Status != capacity.QuotaFailed || !strings.Contains(v.Quota.Reason, "no RayCluster definition") {
		t.Errorf("q-1 = %s (%q), want Failed with the operator's reason", v.Quota.Status, v.Quota.Reason)
	}
	if n := f.op.Count("ApplyWorkGroup"); n != 0 {
		t.Errorf("the WorkGroup of a failed Ray cluster was applied %d times", n)
	}
	wantEvents(t, "a pass after the failure", f.pass())
}

// A refused WorkGroup fails it and its quotas; the Ray cluster is not
// affected.
func TestOperatorRejectsTheWorkGroup(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.op.Reject("wg-q-2", "spec refused")
	wantEvents(t, "the refused WorkGroup", f.pass(), "ray/acme/c1 RayClusterApplied", "workgroup/q-2 WorkGroupFailed",
		"quota/q-2 QuotaProductionFailed", "quota/q-1 QuotaProductionFailed")
	w, _ := f.app.GetWorkGroup(f.ctx, admin, "q-2")
	if !strings.Contains(w.Reason, capacity.ErrOperatorRejected.Error()) || !strings.Contains(w.Reason, "spec refused") {
		t.Errorf("WorkGroup reason = %q, want the operator's refusal", w.Reason)
	}
	wantEvents(t, "a pass after the failure", f.pass())
}

// A WorkGroup the operator reports Failed fails the production.
func TestWorkGroupFailsOnTheCluster(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.pass()
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseFailed, "no nodes")
	wantEvents(t, "the failed WorkGroup", f.pass(), "workgroup/q-2 WorkGroupFailed",
		"quota/q-2 QuotaProductionFailed", "quota/q-1 QuotaProductionFailed")
	if w, _ := f.app.GetWorkGroup(f.ctx, admin, "q-2"); w.Reason != "no nodes" {
		t.Errorf("WorkGroup reason = %q, want the operator's", w.Reason)
	}
}

// A transient operator error records nothing; the next pass does the step.
func TestTransientOperatorErrorsAreRetried(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.op.Fail("ApplyRayCluster", errors.New("connection refused"))
	mark := len(f.store.Events(0))
	err := f.pm.Pass(f.ctx)
	if err == nil || !strings.Contains(err.Error(), "apply Ray cluster "+rayName) || errors.Is(err, app.ErrStopped) {
		t.Fatalf("pass with a failing operator: %v", err)
	}
	wantEvents(t, "the failed pass", eventNames(f.store.Events(mark)))
	f.op.Fail("ApplyRayCluster", nil)
	wantEvents(t, "the retry", f.pass(), "ray/acme/c1 RayClusterApplied", "workgroup/q-2 WorkGroupApplied")
}

// A process manager stopped between the operator's answer and its record
// (a crash) is resumed by a new one: it applies again (the operator
// changes nothing) and records the step once.
func TestStoppedStepsResumeOnce(t *testing.T) {
	for _, step := range []string{app.StepRayApplied, app.StepWorkGroupApplied} {
		t.Run(step, func(t *testing.T) {
			f := newFixture(t)
			f.seed(8)
			f.createGU("gu1", 4, 8)
			f.pm.Fault = func(s string) error {
				if s == step {
					return errors.New("crash")
				}
				return nil
			}
			if err := f.pm.Pass(f.ctx); !errors.Is(err, app.ErrStopped) {
				t.Fatalf("pass = %v, want ErrStopped", err)
			}
			f.pm = app.NewProcessManager(f.app, f.store, f.op, 0)
			f.pass()
			f.pass()
			applied := map[string]int{}
			for _, e := range eventNames(f.store.Events(0)) {
				applied[e]++
			}
			if applied["ray/acme/c1 RayClusterApplied"] != 1 || applied["workgroup/q-2 WorkGroupApplied"] != 1 {
				t.Errorf("recorded %v, want each resource applied once", applied)
			}
		})
	}
}

// A resource that vanished after it was accepted is applied again, its
// Ray cluster first.
func TestVanishedResourcesAreAppliedAgain(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.pass()
	f.op.Vanish("wg-q-2")
	f.op.Vanish(rayName)
	calls := len(f.op.Calls())
	wantEvents(t, "a pass after the resources vanished", f.pass())
	got := f.op.Calls()[calls:]
	want := []string{"RayClusterStatus " + rayName, "ApplyRayCluster " + rayName, "WorkGroupStatus wg-q-2",
		"ApplyRayCluster " + rayName, "ApplyWorkGroup wg-q-2"}
	if !slices.Equal(got, want) {
		t.Errorf("the pass asked the operator %q, want %q", got, want)
	}
	if _, ok := f.op.WorkGroup("wg-q-2"); !ok {
		t.Error("the WorkGroup was not applied again")
	}
}

// A changed spec (a new generation) is applied and observed again.
func TestUpdatedWorkGroupIsAppliedAgain(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.produce()
	if _, err := f.app.UpdateQuota(f.ctx, admin, "q-2", new(int64(2)), new(int64(8))); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "the pass after the update", f.pass(), "workgroup/q-2 WorkGroupApplied")
	if spec, _ := f.op.WorkGroup("wg-q-2"); spec.Generation != 2 || spec.GPUs != 2 {
		t.Errorf("applied spec = generation %d with %d GPUs, want 2 and 2", spec.Generation, spec.GPUs)
	}
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseRunning, "")
	wantEvents(t, "the new generation running", f.pass(), "workgroup/q-2 WorkGroupRunning")
}

// Run passes until its context ends, and stops with ErrStopped when the
// fault hook stops a step.
func TestRunStopsOnItsFaultHook(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.pm.Fault = func(s string) error {
		if s == app.StepRayApply {
			return errors.New("crash")
		}
		return nil
	}
	if err := f.pm.Run(f.ctx); !errors.Is(err, app.ErrStopped) {
		t.Fatalf("Run = %v, want ErrStopped", err)
	}
	if n := f.op.Count("ApplyRayCluster"); n != 0 {
		t.Errorf("the Ray cluster was applied %d times past the stop", n)
	}
}
