package capacity

import "time"

// Event is one fact about an aggregate. The store assigns Version (one
// more than the aggregate's current version) when it records the event.
type Event struct {
	// Aggregate is "tenant/<id>", "cluster/<name>", "quota/<id>",
	// "ray/<tenant>/<cluster>" or "workgroup/<quota id>".
	Aggregate string
	Version   int64
	TenantID  string
	At        time.Time
	Data      any
}

// Aggregate ids. A Ray cluster is one per ⟨tenant, cluster⟩ and a
// WorkGroup one per quota, so their ids are made from those: a second
// request for the same one lands on the same aggregate, and the event
// store's version check turns a race between two into a conflict.
func TenantAggregate(id string) string           { return "tenant/" + id }
func ClusterAggregate(name string) string        { return "cluster/" + name }
func QuotaAggregate(id string) string            { return "quota/" + id }
func RayAggregate(tenant, cluster string) string { return "ray/" + tenant + "/" + cluster }
func WorkGroupAggregate(quotaID string) string   { return "workgroup/" + quotaID }

// TenantCreated: the quota service knows the tenant.
type TenantCreated struct{ Name string }

// TenantRenamed: the tenant's display name changed.
type TenantRenamed struct{ Name string }

// ClusterCreated: a compute cluster quotas can be produced on.
type ClusterCreated struct{ Name, Description string }

// InventorySet: the cluster has Total GPUs of MachineType.
type InventorySet struct {
	MachineType string
	Total       int64
}

// InventoryReserved: a root GU quota took GPUs of MachineType.
type InventoryReserved struct {
	MachineType string
	GPUs        int64
	QuotaID     string
}

// InventoryReleased: a root GU quota gave GPUs of MachineType back.
type InventoryReleased struct {
	MachineType string
	GPUs        int64
	QuotaID     string
}

// QuotaCreated: a quota exists.
type QuotaCreated struct {
	ID, Name, Cluster, ParentID, RootID, MachineType string
	Kind                                             Kind
	Level                                            int
	Background                                       bool
	Min, Max                                         int64
	// Provisioning: the quota waits for WorkGroups (GU roots and WorkGroup
	// quotas); otherwise it is Active at once.
	Provisioning bool
}

// QuotaUpdated: a quota's limits changed.
type QuotaUpdated struct{ Min, Max int64 }

// QuotaUnsubscribed: the quota is being given up; its WorkGroups go first.
type QuotaUnsubscribed struct{ Reason string }

// QuotaDeleted: the quota is gone.
type QuotaDeleted struct{}

// QuotaProduced: every WorkGroup the quota needs runs.
type QuotaProduced struct{ WorkGroups []ProducedWorkGroup }

// ProducedWorkGroup is one running WorkGroup of a produced quota.
type ProducedWorkGroup struct {
	QuotaID, QuotaName, WorkGroupID, MachineType string
	GPUs                                         int64
}

// QuotaProductionFailed: a WorkGroup the quota needs failed.
type QuotaProductionFailed struct{ Reason string }

// RayClusterProvisioning: the Ray cluster of ⟨tenant, cluster⟩ is to be
// created; recorded before the operator is asked so a restart resumes it.
type RayClusterProvisioning struct {
	Cluster, RayName, CUQuotaID, CUQuotaName string
}

// RayClusterApplied: the operator accepted the Ray cluster's resource.
type RayClusterApplied struct{}

// RayClusterRunning: the operator reports the Ray cluster ready.
type RayClusterRunning struct{ Endpoint string }

// RayClusterFailed: the operator reports the Ray cluster failed.
type RayClusterFailed struct{ Reason string }

// WorkGroupProvisioning: a GU quota's WorkGroup is to be created
// (generation 1), recorded before the operator is asked.
type WorkGroupProvisioning struct {
	WorkGroupID, QuotaID, QuotaName, RayCluster, Cluster, MachineType string
	GPUs                                                              int64
}

// WorkGroupApplied: the operator accepted the resource at Generation.
type WorkGroupApplied struct{ Generation int64 }

// WorkGroupSpecChanged: the quota subtree behind the WorkGroup changed; the
// resource is applied again at Generation.
type WorkGroupSpecChanged struct {
	Generation int64
	GPUs       int64
}

// WorkGroupRunning: the operator reports the WorkGroup ready.
type WorkGroupRunning struct{ GPUs int64 }

// WorkGroupFailed: provisioning failed for Reason.
type WorkGroupFailed struct{ Reason string }

// WorkGroupDeleting: the WorkGroup is to be deleted.
type WorkGroupDeleting struct{}

// WorkGroupDeleted: the WorkGroup is gone.
type WorkGroupDeleted struct{}
