package app

import (
	"context"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Store is the quota service's event store and inline projection as the
// use cases need them: commands in transactions (Update) and reads of
// committed state (Queries). Package adapters/postgres implements it;
// package apptest holds an in-memory fake and the contract suite both
// pass.
type Store interface {
	// Update runs fn in one transaction and commits the events it recorded
	// together with the states they produce; it returns those events with
	// their versions. fn may run more than once: when another writer
	// recorded an event of an aggregate fn read first, everything is
	// discarded and fn runs again on fresh states, so fn must have no
	// effects outside tx. fn's error is returned as is and records
	// nothing. Two open (not Deleted) quotas of one tenant with the same
	// name are capacity.ErrExists, even when they were decided
	// concurrently. by is recorded with the events.
	Update(ctx context.Context, by Actor, fn func(tx Tx) error) ([]capacity.Event, error)
	Queries
}

// Actor is who caused a command's events, recorded with them for the
// audit log (docs/api/audit.md#an-entry): ID is an operator key id, or the
// service acting on its own (ServiceActor; "config" for the embedded
// defaults recorded at start), and IP the address of the client whose
// request it was, as the gateway saw it ("" when no client made the
// change).
type Actor struct{ ID, IP string }

// ServiceActor records what the service does on its own: the process
// manager's steps of production and unsubscription.
var ServiceActor = Actor{ID: "quota"}

// ProcessStore is what the process manager reads and writes.
type ProcessStore interface {
	// Update is Store.Update.
	Update(ctx context.Context, by Actor, fn func(tx Tx) error) ([]capacity.Event, error)
	// Pending reads the work still to drive, from committed state.
	Pending(ctx context.Context) (Pending, error)
	// Ray is Queries.Ray.
	Ray(ctx context.Context, tenant, cluster string) (capacity.RayCluster, error)
}

// Tx is one command's view of the states it decides from. A state read
// here is the committed one with this transaction's recorded events
// applied, so a decision that records several steps sees each step's
// result. Reads of an aggregate that has no event yet return its zero
// state (Exists is false), not an error.
type Tx interface {
	Tenant(id string) (capacity.Tenant, error)
	Cluster(name string) (capacity.Cluster, error)
	Quota(id string) (capacity.Quota, error)
	// Ray is the Ray cluster of ⟨tenant, cluster⟩.
	Ray(tenant, cluster string) (capacity.RayCluster, error)
	// WorkGroup is the WorkGroup of a quota.
	WorkGroup(quotaID string) (capacity.WorkGroup, error)

	// The lists below select among committed quotas (call them before
	// Record) and return each one's state in this transaction, ordered by
	// level, then creation: the order their QuotaCreated events were
	// recorded in, which within one production is the request's.

	// Children lists the quotas whose parent is parentID, Deleted ones
	// too.
	Children(parentID string) ([]capacity.Quota, error)
	// TenantQuotas lists the tenant's quotas that are not Deleted
	// (Unsubscribing ones too).
	TenantQuotas(tenantID string) ([]capacity.Quota, error)
	// Subtree lists every quota below q (not q), one level after another.
	Subtree(q capacity.Quota) ([]capacity.Quota, error)

	// Record assigns the events their versions (one more than the
	// aggregate's last), applies them to the states above and queues them
	// for the commit.
	Record(events ...capacity.Event) error
}

// Queries read committed state. A missing tenant, cluster, quota,
// WorkGroup or Ray cluster is capacity.ErrNotFound; lists are empty, not
// errors, when nothing matches.
type Queries interface {
	Tenant(ctx context.Context, id string) (capacity.Tenant, error)
	// Tenants lists every tenant by id.
	Tenants(ctx context.Context) ([]capacity.Tenant, error)
	Cluster(ctx context.Context, name string) (capacity.Cluster, error)
	// Clusters lists every cluster by name.
	Clusters(ctx context.Context) ([]capacity.Cluster, error)
	// Quota returns a quota, Deleted ones too.
	Quota(ctx context.Context, id string) (capacity.Quota, error)
	// Quotas lists the quotas f selects by id, or in creation order (Tx's
	// lists) with QuotaFilter.CreationOrder.
	Quotas(ctx context.Context, f QuotaFilter) ([]capacity.Quota, error)
	// WorkGroup returns the WorkGroup of a quota.
	WorkGroup(ctx context.Context, quotaID string) (capacity.WorkGroup, error)
	// WorkGroups lists WorkGroups by quota id; an empty tenant or status
	// matches every one.
	WorkGroups(ctx context.Context, tenant, status string) ([]capacity.WorkGroup, error)
	// Ray returns the Ray cluster of ⟨tenant, cluster⟩.
	Ray(ctx context.Context, tenant, cluster string) (capacity.RayCluster, error)
}

// QuotaFilter selects quotas; empty fields match everything.
type QuotaFilter struct {
	TenantID, Cluster, Kind, Status, RootID string
	RootsOnly                               bool
	// CreationOrder lists in the order the quotas were created (each
	// production's in request order, a parent before its children) rather
	// than by id: how a tree's children are answered, and which of a
	// root's WorkGroup children serves it (docs/api/quota.md#quotas). Not
	// with After, which pages by id.
	CreationOrder bool
	// After is the last id of the previous page; Limit 0 means no limit.
	After string
	Limit int
}

// Pending is the work the process manager has to drive: Ray clusters
// being created (by tenant, cluster), WorkGroups being created or deleted
// (by quota id), and quotas Provisioning, Failed or Unsubscribing (deepest
// level first, then by id).
type Pending struct {
	Rays       []capacity.RayCluster
	WorkGroups []capacity.WorkGroup
	Quotas     []capacity.Quota
}
