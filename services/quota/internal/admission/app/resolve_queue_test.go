package app

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
)

func TestResolveQueue(t *testing.T) {
	f := newFixture(t)
	f.store.put(localQueue("lq-high", "cq-high", nil, []string{"premium"}))
	f.store.put(localQueue("lq-low", "cq-low", nil, nil))
	f.store.put(localQueue("lq-acme", "cq-acme", []string{"acme"}, nil))
	f.store.put(localQueue("lq-gone", "cq-gone", nil, nil))
	f.store.put(localQueue("lq-closing", "gu-acme-old", nil, nil))
	for _, name := range []string{"cq-high", "cq-acme"} {
		f.store.put(Definition{Kind: KindClusterQueue, Name: name, ClusterQueue: gpuQueue("", "8")})
	}
	// The fallback covers every vendor's GPUs.
	low := gpuQueue("", "8")
	low.ResourceGroups = append(low.ResourceGroups, &quotav1.ResourceGroup{CoveredResources: []string{"amd.com/gpu"},
		Flavors: []*quotav1.FlavorQuotas{{Name: "mi300", Resources: []*quotav1.ResourceQuota{{Name: "amd.com/gpu", NominalQuota: "8"}}}}})
	f.store.put(Definition{Kind: KindClusterQueue, Name: "cq-low", ClusterQueue: low})
	f.store.put(Definition{Kind: KindClusterQueue, Name: "gu-acme-old", Origin: OriginWorkGroup, ClusterQueue: gpuQueue("", "0"),
		Closing: "its GU quota was deleted"})
	f.gu.wg = WorkGroup{TenantID: "acme", Quota: "gu1", MachineType: "A100", GPUs: 4, Status: WorkGroupRunning}
	gpus := map[string]string{GPUResource: "2"}
	tests := []struct {
		name         string
		c            Caller
		queue, quota string
		resources    map[string]string
		want         string
		wantErr      error
	}{
		{"a premium tenant's GPU work goes to its tier's queue", premium, "", "", gpus, "cq-high", nil},
		{"a standard tenant's to the fallback", standard, "", "", gpus, "cq-low", nil},
		{"an unknown tier's to the fallback", Caller{TenantID: "gamma", Tier: "gold"}, "", "", gpus, "cq-low", nil},
		{"any vendor's GPUs count", standard, "", "", map[string]string{"amd.com/gpu": "1"}, "cq-low", nil},
		{"work without GPUs needs no admission", premium, "", "", map[string]string{"cpu": "4"}, "", nil},
		{"zero GPUs are no GPUs", premium, "", "", map[string]string{GPUResource: "0"}, "", nil},
		{"a named queue", standard, "lq-low", "", nil, "cq-low", nil},
		{"a queue open to the tenant", premium, "lq-acme", "", gpus, "cq-acme", nil},
		{"a queue closed to the tenant", standard, "lq-acme", "", gpus, "", ErrQueueNotAllowed},
		{"a queue closed to the tier", standard, "lq-high", "", gpus, "", ErrQueueNotAllowed},
		{"operators may use any queue", operator, "lq-acme", "", gpus, "cq-acme", nil},
		{"an unknown queue", premium, "lq-none", "", gpus, "", ErrUnknownQueue},
		{"a GU quota's WorkGroup queue", premium, "", "gu1", gpus, "gu-acme-gu1", nil},
		{"a resource that is not a quantity", premium, "", "", map[string]string{GPUResource: "two"}, "", ErrInvalid},
		// Work its queue could never admit is refused
		// (docs/api/quota.md#which-work-waits-and-where).
		{"a queue whose ClusterQueue was deleted", standard, "lq-gone", "", gpus, "", ErrNoQuota},
		{"a queue whose ClusterQueue is closing", standard, "lq-closing", "", gpus, "", ErrNoQuota},
		{"a named queue without quota for a resource", premium, "lq-acme", "", map[string]string{GPUResource: "1", "cpu": "2"}, "", ErrNoQuota},
		{"the default queue without quota for a resource", premium, "", "", map[string]string{"amd.com/gpu": "1"}, "", ErrNoQuota},
		{"a GU quota without quota for a resource", premium, "", "gu1", map[string]string{"amd.com/gpu": "1"}, "", ErrNoQuota},
		{"none of a resource asks for nothing", premium, "lq-acme", "", map[string]string{GPUResource: "1", "cpu": "0"}, "cq-acme", nil},
		{"a named queue admits, the GU quota beside it is checked", premium, "lq-acme", "gu1", gpus, "cq-acme", nil},
	}
	for _, tt := range tests {
		got, err := f.app.ResolveQueue(f.ctx, tt.c, tt.queue, tt.quota, tt.resources)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
	wantStrings(t, "GU quota checks", f.gu.calls, "acme/gu1", "acme/gu1", "acme/gu1")
	// A GU quota that does not exist is refused beside a named queue too.
	f.gu.err = status.Error(codes.NotFound, "GU Quota Not Exists")
	if got, err := f.app.ResolveQueue(f.ctx, premium, "lq-acme", "gu-none", gpus); got != "" || status.Code(err) != codes.NotFound {
		t.Errorf("a named queue beside a GU quota that does not exist: %q, %v; want NotFound", got, err)
	}
	f.gu.err = nil
	// The refusals name the resource and the queue, or the ClusterQueue
	// that cannot admit.
	for _, tt := range []struct {
		queue     string
		resources map[string]string
		want      string
	}{
		{"", map[string]string{"amd.com/gpu": "1"}, `resources[amd.com/gpu]: default queue "lq-high" (cluster queue cq-high) has no quota for amd.com/gpu: no quota to admit it`},
		{"lq-gone", gpus, `queue "lq-gone": cluster queue cq-gone does not exist: no quota to admit it`},
		{"lq-closing", gpus, `queue "lq-closing": cluster queue gu-acme-old admits nothing new (its GU quota was deleted): no quota to admit it`},
	} {
		if _, err := f.app.ResolveQueue(f.ctx, premium, tt.queue, "", tt.resources); err == nil || err.Error() != tt.want {
			t.Errorf("ResolveQueue(%q, %v) = %v, want %q", tt.queue, tt.resources, err, tt.want)
		}
	}
}

// The quota service's GU check answers for itself: its status reaches the
// caller unchanged.
func TestResolveQueuePassesTheGUCheckThrough(t *testing.T) {
	f := newFixture(t)
	creating := status.Error(codes.FailedPrecondition, "GU quota is being created")
	f.gu.err = creating
	if _, err := f.app.ResolveQueue(f.ctx, premium, "", "gu1", nil); err != creating {
		t.Errorf("ResolveQueue = %v, want the GU check's own status", err)
	}
	f.app.gu = nil
	if _, err := f.app.ResolveQueue(f.ctx, premium, "", "gu1", nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("a GU quota without GU quotas: %v, want ErrInvalid", err)
	}
}

// Without a fallback LocalQueue, GPU work of an unknown tier needs no
// admission.
func TestResolveQueueWithoutFallback(t *testing.T) {
	f := newFixture(t)
	f.app.tiers = map[string]string{"premium": "lq-high"}
	if got, err := f.app.ResolveQueue(f.ctx, standard, "", "", map[string]string{GPUResource: "1"}); got != "" || err != nil {
		t.Errorf("ResolveQueue = %q, %v; want no queue", got, err)
	}
}
