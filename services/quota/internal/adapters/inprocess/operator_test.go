package inprocess

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

func TestOperator(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.NewFixed(time.Unix(0, 0))
	op := New(Config{Delay: time.Second, Now: clk.Now})
	ray := capacity.RaySpec{Name: "ray-a-c1", TenantID: "a", Cluster: "c1"}
	wg := capacity.WorkGroupSpec{Name: "wg-q", RayCluster: "ray-a-c1", QuotaName: "q", Generation: 1, GPUs: 2}

	if err := op.ApplyWorkGroup(ctx, wg); err == nil {
		t.Fatal("a WorkGroup was applied without its Ray cluster")
	}
	if err := op.ApplyRayCluster(ctx, ray); err != nil {
		t.Fatal(err)
	}
	if err := op.ApplyRayCluster(ctx, ray); err != nil {
		t.Fatal(err)
	}
	if err := op.ApplyWorkGroup(ctx, wg); err != nil {
		t.Fatal(err)
	}
	if o, _ := op.WorkGroupStatus(ctx, wg); o.Phase != capacity.PhasePending {
		t.Fatalf("before the delay: %+v", o)
	}
	clk.Advance(time.Second)
	if o, _ := op.WorkGroupStatus(ctx, wg); o.Phase != capacity.PhaseRunning || o.Generation != 1 {
		t.Fatalf("after the delay: %+v", o)
	}
	if o, _ := op.RayClusterStatus(ctx, ray); o.Phase != capacity.PhaseRunning || o.Endpoint == "" {
		t.Fatalf("ray: %+v", o)
	}

	// A new generation fails when told to; clearing the failure and
	// applying again recovers.
	op.FailWorkGroup("q", "no nodes")
	wg.Generation = 2
	if err := op.ApplyWorkGroup(ctx, wg); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if o, _ := op.WorkGroupStatus(ctx, wg); o.Phase != capacity.PhaseFailed || o.Reason != "no nodes" || o.Generation != 2 {
		t.Fatalf("failed: %+v", o)
	}
	op.FailWorkGroup("q", "")
	wg.Generation = 3
	_ = op.ApplyWorkGroup(ctx, wg)
	clk.Advance(time.Second)
	if o, _ := op.WorkGroupStatus(ctx, wg); o.Phase != capacity.PhaseRunning {
		t.Fatalf("recovered: %+v", o)
	}

	if err := op.DeleteWorkGroup(ctx, wg); err != nil {
		t.Fatal(err)
	}
	if err := op.DeleteWorkGroup(ctx, wg); err != nil {
		t.Fatalf("deleting a missing WorkGroup: %v", err)
	}
	if o, _ := op.WorkGroupStatus(ctx, wg); o.Phase != capacity.PhaseAbsent {
		t.Fatalf("after delete: %+v", o)
	}
	if c := op.Counts(); c.RayCreated != 1 || c.WorkGroupCreated != 1 || c.WorkGroupUpdated != 2 || c.WorkGroupDeleted != 1 {
		t.Fatalf("counts = %+v", c)
	}

	op.Reject("ray-b-c1", "no matches for kind MFSRayCluster")
	if err := op.ApplyRayCluster(ctx, capacity.RaySpec{Name: "ray-b-c1"}); !errors.Is(err, capacity.ErrOperatorRejected) {
		t.Fatalf("rejected: %v", err)
	}
}
