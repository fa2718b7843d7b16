package app

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestResolveQueue(t *testing.T) {
	f := newFixture(t)
	f.store.put(localQueue("lq-high", "cq-high", nil, []string{"premium"}))
	f.store.put(localQueue("lq-low", "cq-low", nil, nil))
	f.store.put(localQueue("lq-acme", "cq-acme", []string{"acme"}, nil))
	f.gu.wg = WorkGroup{TenantID: "acme", Quota: "gu1", MachineType: "A100", GPUs: 4}
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
	}
	for _, tt := range tests {
		got, err := f.app.ResolveQueue(f.ctx, tt.c, tt.queue, tt.quota, tt.resources)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
	wantStrings(t, "GU quota checks", f.gu.calls, "acme/gu1")
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
