package app

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/taskmesh/taskmesh/platform/domain/quantity"
)

// GPUResource is the resource name of GPUs.
const GPUResource = "nvidia.com/gpu"

// WorkGroup is a GU quota's Ray WorkGroup as the quota service reports it.
type WorkGroup struct {
	TenantID    string
	Quota       string
	MachineType string
	GPUs        int64
	// Status is the WorkGroup's: Running (WorkGroupRunning), Creating,
	// Failed, Deleting or Deleted.
	Status string
}

// GUQuotas checks the GU quota a task names (the quota service).
type GUQuotas interface {
	// CheckGUQuota returns the running WorkGroup of the tenant's GU quota.
	// Its errors are gRPC statuses (GU_QUOTA_NOT_EXISTS as NotFound,
	// GU_QUOTA_CREATING as FailedPrecondition) and are returned to the
	// caller unchanged.
	CheckGUQuota(ctx context.Context, tenantID, quota string) (WorkGroup, error)
}

// WorkGroupQueue names the ClusterQueue of a GU quota's WorkGroup.
func WorkGroupQueue(tenantID, quota string) string {
	return "gu-" + tenantID + "-" + quota
}

// ResolveQueue names the ClusterQueue that admits a task the caller
// submits: the LocalQueue it names (ErrUnknownQueue, ErrQueueNotAllowed),
// the WorkGroup queue of the GU quota it names, the tier's default
// LocalQueue for GPU work that names neither, or "" for work that needs no
// admission. Resources that are not quantities are ErrInvalid.
func (a *App) ResolveQueue(ctx context.Context, c Caller, queue, quota string, resources map[string]string) (string, error) {
	if _, err := quantity.MilliMap(resources); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch {
	case queue != "":
		return a.localQueue(ctx, c, queue)
	case quota != "":
		if a.gu == nil {
			return "", fmt.Errorf("%w: GU quotas are not available", ErrInvalid)
		}
		g, err := a.gu.CheckGUQuota(ctx, c.TenantID, quota)
		if err != nil {
			return "", err
		}
		return WorkGroupQueue(g.TenantID, g.Quota), nil
	case needsGPU(resources):
		lq, ok := a.tiers[c.Tier]
		if !ok {
			lq = a.tiers[""]
		}
		if lq == "" {
			return "", nil
		}
		return a.localQueue(ctx, c, lq)
	}
	return "", nil
}

// needsGPU reports whether resources ask for any GPU.
func needsGPU(resources map[string]string) bool {
	for k, v := range resources {
		if (k == GPUResource || strings.HasSuffix(k, "/gpu")) && v != "0" {
			return true
		}
	}
	return false
}

// localQueue resolves a LocalQueue the caller may use.
func (a *App) localQueue(ctx context.Context, c Caller, name string) (string, error) {
	d, ok, err := a.store.GetDefinition(ctx, KindLocalQueue, name)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("queue %q: %w", name, ErrUnknownQueue)
	}
	spec := d.LocalQueue
	if !c.Operator {
		if len(spec.GetTenants()) > 0 && !slices.Contains(spec.GetTenants(), c.TenantID) {
			return "", fmt.Errorf("queue %q is not open to tenant %q: %w", name, c.TenantID, ErrQueueNotAllowed)
		}
		if len(spec.GetTiers()) > 0 && !slices.Contains(spec.GetTiers(), c.Tier) {
			return "", fmt.Errorf("queue %q is not open to tier %q: %w", name, c.Tier, ErrQueueNotAllowed)
		}
	}
	return spec.GetClusterQueue(), nil
}
