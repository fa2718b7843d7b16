package quota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/inprocess"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Stopping the service at every step of production and starting a fresh
// instance on the same database resumes the flow where it stopped:
// nothing is created twice and QuotaProduced is recorded once.
func TestProductionResumesAfterACrashAtEveryStep(t *testing.T) {
	steps := []string{app.StepRayApply, app.StepRayApplied, app.StepRayObserved, app.StepWorkGroupApply,
		app.StepWorkGroupApplied, app.StepWorkGroupObserved, app.StepQuotaSettle}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t)
			e.seed("acme", "c1", "A100", 8)
			var v app.QuotaView
			e.crashAt(step, func() { v = e.createGU("acme", "c1", "gu1", "A100", 4, 8) })
			if got := e.quota(v.Quota.ID).Quota.Status; got != capacity.QuotaProvisioning {
				t.Fatalf("status after the crash = %s", got)
			}
			e.start(nil)
			v = e.waitStatus(v.Quota.ID, capacity.QuotaActive)
			if c := e.op.Counts(); c.RayCreated != 1 || c.WorkGroupCreated != 1 || c.WorkGroupUpdated != 0 {
				t.Fatalf("operator counts = %+v", c)
			}
			def := defaultChild(t, v)
			if def.WorkGroup.Status != capacity.StatusRunning {
				t.Fatalf("work group = %+v", def.WorkGroup)
			}
			for _, c := range []struct{ agg, typ string }{
				{"quota/" + v.Quota.ID, "QuotaProduced"},
				{"quota/" + def.Quota.ID, "QuotaProduced"},
				{"workgroup/" + def.Quota.ID, "WorkGroupRunning"},
				{"workgroup/" + def.Quota.ID, "WorkGroupApplied"},
				{capacity.RayAggregate("acme", "c1"), "RayClusterRunning"},
			} {
				if n := e.eventCount(c.agg, c.typ); n != 1 {
					t.Errorf("%s %s recorded %d times", c.agg, c.typ, n)
				}
			}
			if n := e.eventCount(capacity.RayAggregate("acme", "c1"), "RayClusterApplied"); n != 1 {
				t.Errorf("RayClusterApplied recorded %d times", n)
			}
		})
	}
}

// The same for unsubscription: the WorkGroup is deleted once, the quotas
// end Deleted and the inventory is given back once.
func TestUnsubscriptionResumesAfterACrashAtEveryStep(t *testing.T) {
	for _, step := range []string{app.StepWorkGroupDelete, app.StepWorkGroupDeleted, app.StepQuotaDelete} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t)
			e.seed("acme", "c1", "A100", 8)
			v := e.createGU("acme", "c1", "gu1", "A100", 4, 8)
			e.waitStatus(v.Quota.ID, capacity.QuotaActive)
			e.crashAt(step, func() {
				got, err := e.app().DeleteQuota(context.Background(), admin, v.Quota.ID, "unsubscribed")
				if err != nil || got.Quota.Status != capacity.QuotaUnsubscribing {
					t.Errorf("delete = %+v, %v", got.Quota, err)
				}
			})
			e.start(nil)
			v = e.waitStatus(v.Quota.ID, capacity.QuotaDeletedStatus)
			for _, c := range v.Children {
				if c.Quota.Status != capacity.QuotaDeletedStatus {
					t.Errorf("child %s is %s", c.Quota.Name, c.Quota.Status)
				}
				if c.WorkGroup != nil && c.WorkGroup.Status != capacity.StatusDeleted {
					t.Errorf("work group %s is %s", c.WorkGroup.ID, c.WorkGroup.Status)
				}
			}
			if c := e.op.Counts(); c.WorkGroupDeleted != 1 {
				t.Fatalf("operator counts = %+v", c)
			}
			cl, _ := e.app().GetCluster(context.Background(), admin, "c1")
			if inv := cl.Inventory["A100"]; inv.Allocated != 0 {
				t.Fatalf("inventory after unsubscription = %+v", inv)
			}
			if n := e.eventCount("cluster/c1", "InventoryReleased"); n != 1 {
				t.Fatalf("InventoryReleased recorded %d times", n)
			}
		})
	}
}

// Unsubscribing when the WorkGroup is already gone from the cluster
// succeeds; when the tenant has no Ray cluster it succeeds at once.
func TestUnsubscriptionOfWhatIsAlreadyGone(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	v := e.createGU("acme", "c1", "gu1", "A100", 4, 8)
	v = e.waitStatus(v.Quota.ID, capacity.QuotaActive)
	e.op.RemoveWorkGroup(defaultChild(t, v).WorkGroup.ID)
	if _, err := e.app().DeleteQuota(context.Background(), admin, v.Quota.ID, ""); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(v.Quota.ID, capacity.QuotaDeletedStatus)
	if c := e.op.Counts(); c.WorkGroupDeleted != 0 {
		t.Fatalf("operator counts = %+v", c)
	}

	// Another tenant whose GU quota has only the background child: no
	// WorkGroup, never a Ray cluster; unsubscription answers Deleted.
	e.seed("beta", "c1", "A100", 8)
	w := e.createGU("beta", "c1", "bg-only", "A100", 2, 2, capacity.Spec{Name: "bg-only-background", Max: 2, Background: true})
	if w.Quota.Status != capacity.QuotaActive {
		t.Fatalf("quota without WorkGroups = %s", w.Quota.Status)
	}
	if _, err := e.app().GetRayCluster(context.Background(), admin, "beta", "c1"); err == nil {
		t.Fatal("a Ray cluster was created for a background-only quota")
	}
	got, err := e.app().DeleteQuota(context.Background(), admin, w.Quota.ID, "")
	if err != nil || got.Quota.Status != capacity.QuotaDeletedStatus {
		t.Fatalf("delete = %+v, %v", got.Quota, err)
	}
	// Deleting again succeeds and changes nothing: what is gone is
	// unsubscribed already. An id no quota ever had is still not found.
	again, err := e.app().DeleteQuota(context.Background(), admin, w.Quota.ID, "")
	if err != nil || again.Quota.Status != capacity.QuotaDeletedStatus || again.Quota.Version != got.Quota.Version {
		t.Fatalf("deleting a deleted quota = %+v, %v", again.Quota, err)
	}
	if _, err := e.app().DeleteQuota(context.Background(), admin, "q-never-made", ""); !errors.Is(err, capacity.ErrNotFound) {
		t.Fatalf("deleting an unknown quota: %v", err)
	}
}

// The cluster lost the resources the quota service had applied (an
// operator that lost its state, a resource deleted by hand): they are
// applied again and production still completes.
func TestProductionReappliesVanishedResources(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	var v app.QuotaView
	e.crashAt(app.StepWorkGroupObserved, func() { v = e.createGU("acme", "c1", "gu1", "A100", 4, 8) })
	e.op = inprocess.New(inprocess.Config{Delay: 10 * time.Millisecond})
	e.start(nil)
	e.waitStatus(v.Quota.ID, capacity.QuotaActive)
	if c := e.op.Counts(); c.RayCreated != 1 || c.WorkGroupCreated != 1 {
		t.Fatalf("operator counts = %+v", c)
	}
}

// A Ray cluster recorded Running but gone from the cluster (an operator
// that lost its state, a resource deleted by hand) is created again with
// the next WorkGroup that needs it, rather than that WorkGroup waiting for
// it forever.
func TestNewWorkGroupRecreatesAVanishedRayCluster(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	first := e.createGU("acme", "c1", "gu1", "A100", 2, 4)
	e.waitStatus(first.Quota.ID, capacity.QuotaActive)
	e.op = inprocess.New(inprocess.Config{Delay: 10 * time.Millisecond})
	e.start(nil)
	second := e.createGU("acme", "c1", "gu2", "A100", 2, 4)
	e.waitStatus(second.Quota.ID, capacity.QuotaActive)
	if c := e.op.Counts(); c.RayCreated != 1 || c.WorkGroupCreated != 1 {
		t.Fatalf("operator counts = %+v, want the Ray cluster and gu2's WorkGroup created", c)
	}
}

// Two instances driving the same flows at once (two replicas) create
// nothing twice: operator calls are idempotent and each step is recorded
// once, the loser of a version race seeing it done.
func TestTwoInstancesProduceOnce(t *testing.T) {
	e := newEnv(t)
	second, err := quota.New(quota.Config{DB: e.pool, Kafka: e.broker.Config(), Partitions: 2, Operator: e.op,
		PassInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = second.Run(ctx) }()
	defer func() { cancel(); <-done }()

	e.seed("acme", "c1", "A100", 16)
	var ids []string
	for _, name := range []string{"gu1", "gu2", "gu3"} {
		ids = append(ids, e.createGU("acme", "c1", name, "A100", 2, 4).Quota.ID)
	}
	for _, id := range ids {
		e.waitStatus(id, capacity.QuotaActive)
		if n := e.eventCount("quota/"+id, "QuotaProduced"); n != 1 {
			t.Errorf("QuotaProduced of %s recorded %d times", id, n)
		}
	}
	if c := e.op.Counts(); c.RayCreated != 1 || c.WorkGroupCreated != 3 {
		t.Fatalf("operator counts = %+v", c)
	}
	if n := e.eventCount(capacity.RayAggregate("acme", "c1"), "RayClusterApplied"); n != 1 {
		t.Fatalf("RayClusterApplied recorded %d times", n)
	}
}
