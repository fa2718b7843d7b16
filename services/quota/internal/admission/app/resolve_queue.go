package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/domain/quantity"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
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

// workGroupQueuePrefix starts the name of every WorkGroup's ClusterQueue,
// and of no other: operators cannot define queues of such names
// (docs/api/quota.md#workgroup-queues).
const workGroupQueuePrefix = "gu"

// WorkGroupQueue names the ClusterQueue of a GU quota's WorkGroup:
// gu-<tenant>-<quota>, or that pair's hashed form where it would read back
// more than one way (capacity.ScopedName), so that no two tenants' quotas
// ever share a queue.
func WorkGroupQueue(tenantID, quota string) string {
	return capacity.ScopedName(workGroupQueuePrefix, tenantID, quota)
}

// IsWorkGroupQueue reports whether name is in the namespace of the
// WorkGroups' ClusterQueues.
func IsWorkGroupQueue(name string) bool {
	return strings.HasPrefix(name, workGroupQueuePrefix+"-")
}

// ResolveQueue names the ClusterQueue that admits a task the caller
// submits: the LocalQueue it names (ErrUnknownQueue, ErrQueueNotAllowed),
// the WorkGroup queue of the GU quota it names, the tier's default
// LocalQueue for GPU work that names neither, or "" for work that needs no
// admission. Resources that are not quantities are ErrInvalid. Work that
// queue could never admit is ErrNoQuota (docs/api/quota.md#which-work-waits-and-where):
// its LocalQueue's ClusterQueue does not exist or is closing, or the task
// asks for a resource the ClusterQueue has no quota for.
func (a *App) ResolveQueue(ctx context.Context, c Caller, queue, quota string, resources map[string]string) (string, error) {
	reqs, err := quantity.MilliMap(resources)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch {
	case queue != "":
		// The named queue admits it; a GU quota named beside it must
		// exist and run all the same, as for work that names it alone
		// (30010, 30011), whatever else the task names
		// (docs/api/quota.md#which-work-waits-and-where).
		if quota != "" && a.gu != nil {
			if _, err := a.gu.CheckGUQuota(ctx, c.TenantID, quota); err != nil {
				return "", err
			}
		}
		return a.admittingQueue(ctx, c, fmt.Sprintf("queue %q", queue), queue, reqs)
	case quota != "":
		if a.gu == nil {
			return "", fmt.Errorf("%w: GU quotas are not available", ErrInvalid)
		}
		g, err := a.gu.CheckGUQuota(ctx, c.TenantID, quota)
		if err != nil {
			return "", err
		}
		// The queue of a Running WorkGroup, whose spec is known even
		// before the sync has recorded it.
		cq := WorkGroupQueue(g.TenantID, g.Quota)
		if err := covers(fmt.Sprintf("GU quota %q", quota), cq, workGroupSpec(g), reqs); err != nil {
			return "", err
		}
		return cq, nil
	case needsGPU(resources):
		lq, ok := a.tiers[c.Tier]
		if !ok {
			lq = a.tiers[""]
		}
		if lq == "" {
			return "", nil
		}
		return a.admittingQueue(ctx, c, fmt.Sprintf("default queue %q", lq), lq, reqs)
	}
	return "", nil
}

// admittingQueue resolves LocalQueue name (where says how the task came
// to it) to a ClusterQueue that exists, admits, and has quota for every
// resource reqs asks for.
func (a *App) admittingQueue(ctx context.Context, c Caller, where, name string, reqs map[string]int64) (string, error) {
	cq, err := a.localQueue(ctx, c, name)
	if err != nil {
		return "", err
	}
	d, ok, err := a.store.GetDefinition(ctx, KindClusterQueue, cq)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", fmt.Errorf("%s: cluster queue %s does not exist: %w", where, cq, ErrNoQuota)
	case d.Closing != "":
		return "", fmt.Errorf("%s: cluster queue %s admits nothing new (%s): %w", where, cq, d.Closing, ErrNoQuota)
	}
	if err := covers(where, cq, d.ClusterQueue, reqs); err != nil {
		return "", err
	}
	return cq, nil
}

// covers checks that ClusterQueue cq (spec) has quota for every resource
// reqs asks for: the core never admits a workload asking for one it has
// not (docs/api/quota.md#which-work-waits-and-where). The first such
// resource by name is named.
func covers(where, cq string, spec *quotav1.ClusterQueueSpec, reqs map[string]int64) error {
	covered := map[string]bool{}
	for _, g := range spec.GetResourceGroups() {
		for _, r := range g.GetCoveredResources() {
			covered[r] = true
		}
	}
	for _, r := range slices.Sorted(maps.Keys(reqs)) {
		if reqs[r] > 0 && !covered[r] {
			return fmt.Errorf("resources[%s]: %s (cluster queue %s) has no quota for %s: %w", r, where, cq, r, ErrNoQuota)
		}
	}
	return nil
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
