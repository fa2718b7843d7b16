package quota_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Producing a GU root (docs/api/quota.md, "Production and unsubscription"): inventory is taken, the
// standard second level is created, the Ray cluster and the WorkGroup of
// the non-background second-level quota are created once, and the quota
// becomes Active with QuotaProduced recorded.
func TestProductionEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 16)
	v := e.createGU("acme", "c1", "gu1", "A100", 4, 8)
	// The answer is read after the commit, and the in-process operator may
	// have produced the quota by then: Provisioning or already Active
	// (docs/api/quota.md, CreateQuota).
	if (v.Quota.Status != capacity.QuotaProvisioning && v.Quota.Status != capacity.QuotaActive) || v.Quota.Level != 1 || len(v.Children) != 2 {
		t.Fatalf("created = %+v", v)
	}
	def, bg := v.Children[0], v.Children[1]
	if def.Quota.Background {
		def, bg = bg, def
	}
	if def.Quota.Name != "gu1-default" || def.Quota.Min != 4 || def.Quota.Max != 8 || def.Quota.MachineType != "A100" {
		t.Fatalf("default child = %+v", def.Quota)
	}
	if !bg.Quota.Background || bg.Quota.Name != "gu1-background" || bg.Quota.Min != 0 || bg.WorkGroup != nil {
		t.Fatalf("background child = %+v (work group %v)", bg.Quota, bg.WorkGroup)
	}
	v = e.waitStatus(v.Quota.ID, capacity.QuotaActive)
	for _, c := range v.Children {
		if c.Quota.Background {
			continue
		}
		if c.WorkGroup == nil || c.WorkGroup.Status != capacity.StatusRunning || c.WorkGroup.GPUs != 4 || c.Quota.Status != capacity.QuotaActive {
			t.Fatalf("default child after production = %+v, %+v", c.Quota, c.WorkGroup)
		}
	}
	// The operator got the second-level quota, not the root.
	spec, ok := e.op.WorkGroup(capacity.WorkGroupName(def.Quota.ID))
	if !ok || spec.QuotaID != def.Quota.ID || spec.QuotaName != "gu1-default" || spec.MachineType != "A100" || spec.GPUs != 4 {
		t.Fatalf("operator spec = %+v (found %v)", spec, ok)
	}
	if c := e.op.Counts(); c.RayCreated != 1 || c.WorkGroupCreated != 1 {
		t.Fatalf("operator counts = %+v", c)
	}
	ray, err := e.app().GetRayCluster(context.Background(), admin, "acme", "c1")
	if err != nil || ray.Status != capacity.StatusRunning || ray.Endpoint == "" {
		t.Fatalf("ray = %+v, %v", ray, err)
	}
	cl, _ := e.app().GetCluster(context.Background(), admin, "c1")
	if inv := cl.Inventory["A100"]; inv.Allocated != 4 || inv.Available() != 12 {
		t.Fatalf("inventory = %+v", inv)
	}
	if n := e.eventCount("quota/"+v.Quota.ID, "QuotaProduced"); n != 1 {
		t.Fatalf("QuotaProduced recorded %d times", n)
	}

	// A second GU quota of the tenant on the cluster reuses its Ray
	// cluster (one per ⟨tenant, cluster⟩, not per quota).
	w := e.createGU("acme", "c1", "gu2", "A100", 2, 2)
	e.waitStatus(w.Quota.ID, capacity.QuotaActive)
	if c := e.op.Counts(); c.RayCreated != 1 || c.WorkGroupCreated != 2 {
		t.Fatalf("operator counts after a second quota = %+v", c)
	}
}

// Short inventory refuses the quota and records nothing.
func TestProductionInventoryShortCreatesNothing(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 3)
	var before int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&before)
	_, err := e.app().CreateQuota(context.Background(), admin, capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
		Spec: capacity.Spec{Name: "big", Min: 4, Max: 8, MachineType: "A100"}})
	if !errors.Is(err, capacity.ErrInventoryInsufficient) {
		t.Fatalf("err = %v, want ErrInventoryInsufficient", err)
	}
	// Unknown machine type: no inventory at all.
	_, err = e.app().CreateQuota(context.Background(), admin, capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
		Spec: capacity.Spec{Name: "h", Min: 1, Max: 1, MachineType: "H100"}})
	if !errors.Is(err, capacity.ErrInventoryInsufficient) {
		t.Fatalf("err = %v, want ErrInventoryInsufficient", err)
	}
	var after int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&after)
	qs, _ := e.app().ListQuotas(context.Background(), admin, allQuotas())
	if after != before || len(qs) != 0 || e.op.Counts().RayCreated != 0 {
		t.Fatalf("events %d → %d, quotas %d, operator %+v", before, after, len(qs), e.op.Counts())
	}
}

// An operator failure ends in a visible Failed state with the reason; an
// update while the resource exists applies it again and recovers.
func TestProductionOperatorFailure(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	e.op.FailWorkGroup("gu1-default", "no A100 nodes schedulable")
	v := e.createGU("acme", "c1", "gu1", "A100", 4, 4)
	v = e.waitStatus(v.Quota.ID, capacity.QuotaFailed)
	def := defaultChild(t, v)
	if def.WorkGroup.Status != capacity.StatusFailed || def.WorkGroup.Reason != "no A100 nodes schedulable" {
		t.Fatalf("work group = %+v", def.WorkGroup)
	}
	if def.Quota.Status != capacity.QuotaFailed || v.Quota.Reason == "" {
		t.Fatalf("quota statuses = %s (%s), root reason %q", def.Quota.Status, def.Quota.Reason, v.Quota.Reason)
	}
	if _, err := e.app().CheckGUQuota(context.Background(), "acme", "gu1"); err == nil {
		t.Fatal("a failed GU quota passed the submit-time check")
	}

	// Updates are allowed while the resource exists (here Failed).
	e.op.FailWorkGroup("gu1-default", "")
	if _, err := e.app().UpdateQuota(context.Background(), admin, def.Quota.ID, new(int64(3)), new(int64(4))); err != nil {
		t.Fatal(err)
	}
	v = e.waitStatus(v.Quota.ID, capacity.QuotaActive)
	def = defaultChild(t, v)
	if def.WorkGroup.Status != capacity.StatusRunning || def.WorkGroup.GPUs != 3 || def.WorkGroup.Generation != 2 {
		t.Fatalf("work group after update = %+v", def.WorkGroup)
	}
}

// A Ray cluster resource the cluster refuses (its CRD is not installed, a
// known integration pitfall) fails the WorkGroup and the quota visibly.
func TestProductionRayClusterRejected(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	e.op.Reject(capacity.RayName("acme", "c1"), "no matches for kind MFS")
	v := e.createGU("acme", "c1", "gu1", "A100", 2, 2)
	v = e.waitStatus(v.Quota.ID, capacity.QuotaFailed)
	def := defaultChild(t, v)
	if def.WorkGroup.Status != capacity.StatusFailed {
		t.Fatalf("work group = %+v", def.WorkGroup)
	}
	ray, _ := e.app().GetRayCluster(context.Background(), admin, "acme", "c1")
	if ray.Status != capacity.StatusFailed || ray.Reason == "" {
		t.Fatalf("ray = %+v", ray)
	}
}

func defaultChild(t *testing.T, v app.QuotaView) app.QuotaView {
	t.Helper()
	for _, c := range v.Children {
		if c.WorkGroup != nil {
			return c
		}
	}
	t.Fatalf("no child with a WorkGroup in %+v", v)
	return app.QuotaView{}
}

// A Ray cluster the operator reports Failed fails the WorkGroups inside
// it and their quota, with the cluster's reason; the WorkGroup is never
// taken as Running while its cluster is not.
func TestProductionRayClusterFailure(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	e.op.FailRayCluster(capacity.RayName("acme", "c1"), "head node unschedulable")
	v := e.createGU("acme", "c1", "gu1", "A100", 4, 4)
	v = e.waitStatus(v.Quota.ID, capacity.QuotaFailed)
	def := defaultChild(t, v)
	if def.WorkGroup.Status != capacity.StatusFailed || !strings.Contains(def.WorkGroup.Reason, "head node unschedulable") {
		t.Fatalf("work group = %+v", def.WorkGroup)
	}
	if _, err := e.app().CheckGUQuota(context.Background(), "acme", "gu1"); err == nil {
		t.Fatal("a GU quota whose Ray cluster failed passed the submit-time check")
	}
}
