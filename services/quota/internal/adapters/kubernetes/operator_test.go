package kubernetes

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func newFake() *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		RayClusters: "MFSRayClusterList", WorkGroups: "MFSWorkGroupList"})
}

var (
	raySpec = capacity.RaySpec{Name: "ray-acme-c1", TenantID: "acme", Cluster: "c1", CUQuotaID: "q-cu", CUQuotaName: "cu-default"}
	wgSpec  = capacity.WorkGroupSpec{Name: "wg-q-2", TenantID: "acme", Cluster: "c1", RayCluster: "ray-acme-c1", QuotaID: "q-2",
		QuotaName: "gu-default", MachineType: "A100", GPUs: 4, Generation: 1,
		Quota: capacity.QuotaNode{ID: "q-2", Name: "gu-default", Min: 4, Max: 8, Children: []capacity.QuotaNode{
			{ID: "q-3", Name: "l3", Min: 1, Max: 2, Children: []capacity.QuotaNode{{ID: "q-4", Name: "l4", Min: 1, Max: 2,
				Children: []capacity.QuotaNode{{ID: "q-5", Name: "l5", Min: 0, Max: 1}}}}}}}}
)

func golden(t *testing.T, name string, obj *unstructured.Unstructured) {
	t.Helper()
	got, err := yaml.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

// The objects written are the golden ones: the second-level quota with its
// subtree nested at every depth, labels, the spec generation.
func TestObjectsWritten(t *testing.T) {
	c := newFake()
	op := New(c, "taskmesh")
	ctx := context.Background()
	if err := op.ApplyRayCluster(ctx, raySpec); err != nil {
		t.Fatal(err)
	}
	if err := op.ApplyWorkGroup(ctx, wgSpec); err != nil {
		t.Fatal(err)
	}
	ray, err := c.Resource(RayClusters).Namespace("taskmesh").Get(ctx, "ray-acme-c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "mfsraycluster.yaml", ray)
	wg, err := c.Resource(WorkGroups).Namespace("taskmesh").Get(ctx, "wg-q-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "mfsworkgroup.yaml", wg)

	// Applying the same spec again writes nothing; a new generation
	// updates the object in place.
	before := len(c.Actions())
	if err := op.ApplyWorkGroup(ctx, wgSpec); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Actions()[before:] {
		if a.GetVerb() != "get" {
			t.Fatalf("a repeated apply wrote: %v", a)
		}
	}
	next := wgSpec
	next.Generation, next.GPUs = 2, 6
	if err := op.ApplyWorkGroup(ctx, next); err != nil {
		t.Fatal(err)
	}
	wg, _ = c.Resource(WorkGroups).Namespace("taskmesh").Get(ctx, "wg-q-2", metav1.GetOptions{})
	if gpus, _, _ := unstructured.NestedInt64(wg.Object, "spec", "gpus"); gpus != 6 || wg.GetAnnotations()[AnnotSpecGeneration] != "2" {
		t.Fatalf("updated object = %v", wg.Object)
	}
}

func TestStatusToObservation(t *testing.T) {
	tests := []struct {
		status map[string]any
		want   capacity.Observation
	}{
		{nil, capacity.Observation{Phase: capacity.PhasePending}},
		{map[string]any{"phase": "Creating"}, capacity.Observation{Phase: capacity.PhasePending}},
		{map[string]any{"phase": "Running", "observedGeneration": int64(2), "endpoint": "ray://x:10001"},
			capacity.Observation{Phase: capacity.PhaseRunning, Generation: 2, Endpoint: "ray://x:10001"}},
		{map[string]any{"phase": "Ready"}, capacity.Observation{Phase: capacity.PhaseRunning}},
		{map[string]any{"phase": "Failed", "reason": "fuxi pods unschedulable", "observedGeneration": int64(1)},
			capacity.Observation{Phase: capacity.PhaseFailed, Reason: "fuxi pods unschedulable", Generation: 1}},
	}
	for _, tt := range tests {
		c := newFake()
		op := New(c, "taskmesh")
		ctx := context.Background()
		if err := op.ApplyWorkGroup(ctx, wgSpec); err != nil {
			t.Fatal(err)
		}
		if tt.status != nil {
			obj, _ := c.Resource(WorkGroups).Namespace("taskmesh").Get(ctx, wgSpec.Name, metav1.GetOptions{})
			obj.Object["status"] = tt.status
			if _, err := c.Resource(WorkGroups).Namespace("taskmesh").Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := op.WorkGroupStatus(ctx, wgSpec)
		if err != nil || got != tt.want {
			t.Errorf("status %v: %+v, %v; want %+v", tt.status, got, err, tt.want)
		}
	}
}

func TestDeleteAndAbsence(t *testing.T) {
	c := newFake()
	op := New(c, "taskmesh")
	ctx := context.Background()
	// Deleting a WorkGroup that does not exist succeeds.
	if err := op.DeleteWorkGroup(ctx, wgSpec); err != nil {
		t.Fatalf("delete of a missing object: %v", err)
	}
	if o, err := op.WorkGroupStatus(ctx, wgSpec); err != nil || o.Phase != capacity.PhaseAbsent {
		t.Fatalf("status of a missing object: %+v, %v", o, err)
	}
	if err := op.ApplyWorkGroup(ctx, wgSpec); err != nil {
		t.Fatal(err)
	}
	if err := op.DeleteWorkGroup(ctx, wgSpec); err != nil {
		t.Fatal(err)
	}
	if o, _ := op.WorkGroupStatus(ctx, wgSpec); o.Phase != capacity.PhaseAbsent {
		t.Fatalf("after delete: %+v", o)
	}
}

// A cluster without the MFS custom resource definitions refuses the
// resource: the error says it can never succeed as is; other failures are
// retried.
func TestMissingCRDIsRejected(t *testing.T) {
	c := newFake()
	c.PrependReactor("create", "mfsrayclusters", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "mfs.taskmesh.io", Resource: "mfsrayclusters"}, "")
	})
	c.PrependReactor("create", "mfsworkgroups", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
	})
	op := New(c, "taskmesh")
	if err := op.ApplyRayCluster(context.Background(), raySpec); !errors.Is(err, capacity.ErrOperatorRejected) {
		t.Fatalf("missing CRD: %v", err)
	}
	err := op.ApplyWorkGroup(context.Background(), wgSpec)
	if err == nil || errors.Is(err, capacity.ErrOperatorRejected) {
		t.Fatalf("transient failure: %v", err)
	}
}

// A status written by the MFS operator wakes the watcher.
func TestWatchReportsChanges(t *testing.T) {
	c := newFake()
	op := New(c, "taskmesh")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	woke := make(chan struct{}, 16)
	op.Watch(ctx, func() { woke <- struct{}{} })
	deadline := time.After(10 * time.Second)
	// The fake's watch starts asynchronously: apply until it reports.
	for {
		_ = op.DeleteWorkGroup(ctx, wgSpec)
		if err := op.ApplyWorkGroup(ctx, wgSpec); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woke:
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no change reported")
		}
	}
}
