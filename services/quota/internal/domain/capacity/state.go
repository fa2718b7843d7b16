package capacity

import (
	"sort"
	"strings"
	"time"
)

// Kind says what a quota counts.
type Kind string

// Quota kinds.
const (
	KindCU Kind = "CU"
	KindGU Kind = "GU"
)

// Quota statuses.
const (
	QuotaProvisioning  = "Provisioning"
	QuotaActive        = "Active"
	QuotaFailed        = "Failed"
	QuotaUnsubscribing = "Unsubscribing"
	QuotaDeletedStatus = "Deleted"
)

// WorkGroup and Ray cluster statuses.
const (
	StatusCreating = "Creating"
	StatusRunning  = "Running"
	StatusDeleting = "Deleting"
	StatusDeleted  = "Deleted"
	StatusFailed   = "Failed"
)

// Meta is what every aggregate state carries.
type Meta struct {
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (m *Meta) touch(e Event) {
	m.Version = e.Version
	if m.CreatedAt.IsZero() {
		m.CreatedAt = e.At
	}
	m.UpdatedAt = e.At
}

// Exists reports whether the aggregate has any event.
func (m Meta) Exists() bool { return m.Version > 0 }

// Tenant is the quota service's record of a tenant.
type Tenant struct {
	Meta
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Apply folds one of the tenant's events. The id is the aggregate's
// (TenantAggregate): the events do not repeat it.
func (t Tenant) Apply(e Event) Tenant {
	if t.ID == "" {
		t.ID = strings.TrimPrefix(e.Aggregate, "tenant/")
	}
	switch d := e.Data.(type) {
	case TenantCreated:
		t.Name = d.Name
	case TenantRenamed:
		t.Name = d.Name
	}
	t.touch(e)
	return t
}

// Inventory is a cluster's GPUs of one machine type.
type Inventory struct {
	MachineType string `json:"machine_type"`
	Total       int64  `json:"total"`
	Allocated   int64  `json:"allocated"`
}

// Available is what quotas may still take. Allocated counts only the
// min_units of GU roots: what a quota may use above its minimum is
// borrowed from idle GPUs, not reserved, so it never makes a cluster look
// full.
func (i Inventory) Available() int64 { return i.Total - i.Allocated }

// Cluster is a compute cluster with its inventory.
type Cluster struct {
	Meta
	Name        string               `json:"name"`
	Description string               `json:"description"`
	Inventory   map[string]Inventory `json:"inventory"`
}

// Inventories returns the inventory ordered by machine type.
func (c Cluster) Inventories() []Inventory {
	out := make([]Inventory, 0, len(c.Inventory))
	for _, i := range c.Inventory {
		out = append(out, i)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].MachineType < out[b].MachineType })
	return out
}

// Apply folds one of the cluster's events.
func (c Cluster) Apply(e Event) Cluster {
	inv := func(mt string) Inventory {
		i := c.Inventory[mt]
		i.MachineType = mt
		return i
	}
	// Copy on write: states are values shared with callers.
	m := make(map[string]Inventory, len(c.Inventory)+1)
	for k, v := range c.Inventory {
		m[k] = v
	}
	c.Inventory = m
	switch d := e.Data.(type) {
	case ClusterCreated:
		c.Name, c.Description = d.Name, d.Description
	case InventorySet:
		i := inv(d.MachineType)
		i.Total = d.Total
		c.Inventory[d.MachineType] = i
	case InventoryReserved:
		i := inv(d.MachineType)
		i.Allocated += d.GPUs
		c.Inventory[d.MachineType] = i
	case InventoryReleased:
		i := inv(d.MachineType)
		i.Allocated -= d.GPUs
		c.Inventory[d.MachineType] = i
	}
	c.touch(e)
	return c
}

// Quota is a CU or GU quota.
type Quota struct {
	Meta
	ID          string `json:"id"`
	TenantID    string `json:"tenant_id"`
	Name        string `json:"name"`
	Kind        Kind   `json:"kind"`
	Cluster     string `json:"cluster"`
	Level       int    `json:"level"`
	ParentID    string `json:"parent_id,omitempty"`
	RootID      string `json:"root_id"`
	Background  bool   `json:"background,omitempty"`
	MachineType string `json:"machine_type,omitempty"`
	Min         int64  `json:"min_units"`
	Max         int64  `json:"max_units"`
	Status      string `json:"status"`
	Reason      string `json:"reason,omitempty"`
}

// HasWorkGroup reports whether the quota is backed by a Ray WorkGroup: a
// non-background second-level GU quota. Deeper quotas are part of their
// second-level ancestor's WorkGroup spec; the background quota never gets
// one (the default Ray cluster must not be mapped onto it).
func (q Quota) HasWorkGroup() bool { return q.Kind == KindGU && q.Level == 2 && !q.Background }

// Open reports whether the quota is neither given up nor gone.
func (q Quota) Open() bool { return q.Status != QuotaUnsubscribing && q.Status != QuotaDeletedStatus }

// Apply folds one of the quota's events.
func (q Quota) Apply(e Event) Quota {
	switch d := e.Data.(type) {
	case QuotaCreated:
		q.ID, q.TenantID, q.Name, q.Kind, q.Cluster = d.ID, e.TenantID, d.Name, d.Kind, d.Cluster
		q.Level, q.ParentID, q.RootID, q.Background, q.MachineType = d.Level, d.ParentID, d.RootID, d.Background, d.MachineType
		q.Min, q.Max = d.Min, d.Max
		// Usable at once, unless a WorkGroup has to be created for it first.
		q.Status = QuotaActive
		if d.Provisioning {
			q.Status = QuotaProvisioning
		}
	case QuotaUpdated:
		q.Min, q.Max = d.Min, d.Max
	case QuotaProduced:
		q.Status, q.Reason = QuotaActive, ""
	case QuotaProductionFailed:
		q.Status, q.Reason = QuotaFailed, d.Reason
	case QuotaUnsubscribed:
		q.Status, q.Reason = QuotaUnsubscribing, d.Reason
	case QuotaDeleted:
		q.Status = QuotaDeletedStatus
	}
	q.touch(e)
	return q
}

// RayCluster is the Ray cluster of ⟨tenant, cluster⟩.
type RayCluster struct {
	Meta
	TenantID    string `json:"tenant_id"`
	Cluster     string `json:"cluster"`
	Name        string `json:"name"`
	Status      string `json:"status"`
	Applied     bool   `json:"applied"`
	Endpoint    string `json:"endpoint,omitempty"`
	Reason      string `json:"reason,omitempty"`
	CUQuotaID   string `json:"cu_quota_id,omitempty"`
	CUQuotaName string `json:"cu_quota_name,omitempty"`
}

// Usable reports whether WorkGroups may be (or are being) placed on it; a
// failed or never created Ray cluster must be provisioned again.
func (r RayCluster) Usable() bool {
	return r.Exists() && (r.Status == StatusCreating || r.Status == StatusRunning)
}

// Apply folds one of the Ray cluster's events.
func (r RayCluster) Apply(e Event) RayCluster {
	switch d := e.Data.(type) {
	case RayClusterProvisioning:
		r.TenantID, r.Cluster, r.Name = e.TenantID, d.Cluster, d.RayName
		r.CUQuotaID, r.CUQuotaName = d.CUQuotaID, d.CUQuotaName
		// Provisioning again after a failure starts over: nothing of the
		// failed cluster (its endpoint, its reason, the operator's
		// acceptance) carries over.
		r.Status, r.Applied, r.Reason, r.Endpoint = StatusCreating, false, "", ""
	case RayClusterApplied:
		r.Applied = true
	case RayClusterRunning:
		r.Status, r.Endpoint = StatusRunning, d.Endpoint
	case RayClusterFailed:
		r.Status, r.Reason = StatusFailed, d.Reason
	}
	r.touch(e)
	return r
}

// WorkGroup is the Ray WorkGroup of a GU quota.
type WorkGroup struct {
	Meta
	ID          string `json:"id"`
	QuotaID     string `json:"quota_id"`
	QuotaName   string `json:"quota_name"`
	TenantID    string `json:"tenant_id"`
	Cluster     string `json:"cluster"`
	RayCluster  string `json:"ray_cluster"`
	MachineType string `json:"machine_type"`
	GPUs        int64  `json:"gpus"`
	Status      string `json:"status"`
	Reason      string `json:"reason,omitempty"`
	// Generation of the spec; AppliedGeneration is the last one the
	// operator accepted.
	Generation        int64 `json:"generation"`
	AppliedGeneration int64 `json:"applied_generation"`
}

// ResourceExists reports whether the WorkGroup's custom resource exists (or
// is being created): updates are allowed then.
func (w WorkGroup) ResourceExists() bool {
	return w.Status == StatusCreating || w.Status == StatusRunning || w.Status == StatusFailed
}

// Apply folds one of the WorkGroup's events.
func (w WorkGroup) Apply(e Event) WorkGroup {
	switch d := e.Data.(type) {
	case WorkGroupProvisioning:
		w.ID, w.QuotaID, w.QuotaName, w.TenantID = d.WorkGroupID, d.QuotaID, d.QuotaName, e.TenantID
		w.Cluster, w.RayCluster, w.MachineType, w.GPUs = d.Cluster, d.RayCluster, d.MachineType, d.GPUs
		// Generation keeps counting across provisionings, so a status about
		// an earlier WorkGroup of this quota never matches the new one.
		w.Status, w.Reason, w.Generation, w.AppliedGeneration = StatusCreating, "", w.Generation+1, 0
	case WorkGroupApplied:
		w.AppliedGeneration = d.Generation
	case WorkGroupSpecChanged:
		// A new spec makes the WorkGroup Creating again, until the operator
		// reports it Running at this generation.
		w.Generation, w.GPUs, w.Status, w.Reason = d.Generation, d.GPUs, StatusCreating, ""
	case WorkGroupRunning:
		w.Status, w.GPUs = StatusRunning, d.GPUs
	case WorkGroupFailed:
		w.Status, w.Reason = StatusFailed, d.Reason
	case WorkGroupDeleting:
		w.Status = StatusDeleting
	case WorkGroupDeleted:
		w.Status = StatusDeleted
	}
	w.touch(e)
	return w
}
