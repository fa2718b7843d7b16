package app

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// GetWorkGroup returns the WorkGroup of a GU quota; another tenant's is
// not found. A GU quota without a WorkGroup of its own is served by the one
// the submit-time check (CheckGUQuota) uses for it: a root's, that of its
// WorkGroup child (the `<name>-default` of a root made without children);
// a deeper quota's, that of its second-level ancestor. So the WorkGroup of
// every GU quota a task may name can be read, as "one GU quota, one Ray
// WorkGroup" has it — also while the quota is being unsubscribed and once
// it is deleted, so a client that names a GU quota by its root watches its
// WorkGroup go Deleting, then Deleted.
func (a *App) GetWorkGroup(ctx context.Context, c Caller, quotaID string) (capacity.WorkGroup, error) {
	w, err := a.store.WorkGroup(ctx, quotaID)
	if errors.Is(err, capacity.ErrNotFound) {
		if served, ok := a.servingWorkGroup(ctx, quotaID); ok {
			w, err = served, nil
		}
	}
	if err != nil {
		return w, err
	}
	if !visible(c, w.TenantID) {
		return capacity.WorkGroup{}, capacity.NotFound("WorkGroup of quota", quotaID)
	}
	return w, nil
}

// servingWorkGroup is the WorkGroup that serves GU quota quotaID when the
// quota has none of its own (workGroupQuota); ok is false when there is
// none, or the quota is unknown or not a GU quota.
func (a *App) servingWorkGroup(ctx context.Context, quotaID string) (capacity.WorkGroup, bool) {
	q, err := a.store.Quota(ctx, quotaID)
	if err != nil || !q.Exists() || q.Kind != capacity.KindGU {
		return capacity.WorkGroup{}, false
	}
	tree, err := a.store.Quotas(ctx, QuotaFilter{RootID: q.RootID, CreationOrder: true})
	if err != nil {
		return capacity.WorkGroup{}, false
	}
	byID := map[string]capacity.Quota{}
	for _, x := range tree {
		byID[x.ID] = x
	}
	wq, ok := workGroupQuota(q, tree, byID)
	if !ok || wq.ID == q.ID {
		return capacity.WorkGroup{}, false
	}
	w, err := a.store.WorkGroup(ctx, wq.ID)
	return w, err == nil
}

// ListWorkGroups lists WorkGroups; a tenant's key lists its own only.
func (a *App) ListWorkGroups(ctx context.Context, c Caller, tenant, status string) ([]capacity.WorkGroup, error) {
	if !c.Admin {
		if tenant != "" && tenant != c.TenantID {
			return nil, nil
		}
		tenant = c.TenantID
	}
	return a.store.WorkGroups(ctx, tenant, status)
}

// GetRayCluster returns the Ray cluster of ⟨tenant, cluster⟩.
func (a *App) GetRayCluster(ctx context.Context, c Caller, tenant, cluster string) (capacity.RayCluster, error) {
	if !visible(c, tenant) {
		return capacity.RayCluster{}, capacity.NotFound("Ray cluster of", tenant+"/"+cluster)
	}
	return a.store.Ray(ctx, tenant, cluster)
}

// WorkGroup is a GU quota's WorkGroup as admission sees it: while it is
// Running, the capacity a tenant's GPU work may use under that quota.
type WorkGroup struct {
	TenantID string
	// Quota is the GU quota's name (what tasks name); QuotaID its id.
	Quota       string
	QuotaID     string
	Cluster     string
	MachineType string
	GPUs        int64
	// Status is the WorkGroup's (capacity.StatusRunning, …).
	Status string
}

func workGroupOf(w capacity.WorkGroup) WorkGroup {
	return WorkGroup{TenantID: w.TenantID, Quota: w.QuotaName, QuotaID: w.QuotaID, Cluster: w.Cluster,
		MachineType: w.MachineType, GPUs: w.GPUs, Status: w.Status}
}

// Reasons of CheckGUQuota's errors (google.rpc.ErrorInfo, domain
// "taskmesh").
const (
	ReasonGUQuotaNotExists = "GU_QUOTA_NOT_EXISTS"
	ReasonGUQuotaCreating  = "GU_QUOTA_CREATING"
)

// CheckGUQuota is the submit-time check (docs/api/quota.md, "The submit-time GU check") for
// GPU work of tenantID naming a GU quota (its name or id; empty: any of the
// tenant's). It returns the quota's Running WorkGroup, or a gRPC status
// error — in process too, so the admission layer and the RPC answer alike:
// NotFound with reason GU_QUOTA_NOT_EXISTS when the tenant has no such GU
// quota, FailedPrecondition with GU_QUOTA_CREATING when its WorkGroup does
// not exist or is not Running. Other errors are the store's.
//
// A root or deeper quota is served by the WorkGroup of its second-level
// quota (a root: its first open non-background one in creation order); the
// background quota has no WorkGroup.
func (a *App) CheckGUQuota(ctx context.Context, tenantID, quota string) (WorkGroup, error) {
	qs, err := a.store.Quotas(ctx, guQuotasOf(tenantID))
	if err != nil {
		return WorkGroup{}, err
	}
	var named []capacity.Quota
	for _, q := range qs {
		if q.Open() && (quota == "" || q.Name == quota || q.ID == quota) {
			named = append(named, q)
		}
	}
	if len(named) == 0 {
		return WorkGroup{}, GUQuotaNotExists(tenantID, quota)
	}
	byID := map[string]capacity.Quota{}
	for _, q := range qs {
		byID[q.ID] = q
	}
	// why is the latest reason a quota's WorkGroup is not running yet;
	// without one, every quota named has no WorkGroup at all (a background
	// quota, a root whose WorkGroup quota was deleted) and will get none
	// by waiting: that is not "being created" but no quota to run on.
	var why, none string
	for _, q := range named {
		wq, ok := workGroupQuota(q, qs, byID)
		if !ok {
			none = q.Name
			continue
		}
		// A root has no WorkGroup of its own: name the quota whose
		// WorkGroup the work waits for, and the root it was named by.
		of := wq.Name
		if wq.ID != q.ID {
			of = fmt.Sprintf("%s (the one %s runs on)", wq.Name, q.Name)
		}
		w, err := a.store.WorkGroup(ctx, wq.ID)
		switch {
		case errors.Is(err, capacity.ErrNotFound):
			why = fmt.Sprintf("the WorkGroup of GU quota %s does not exist yet", of)
			continue
		case err != nil:
			return WorkGroup{}, err
		}
		if w.Status == capacity.StatusRunning {
			return workGroupOf(w), nil
		}
		why = fmt.Sprintf("the WorkGroup of GU quota %s is %s, not Running", of, w.Status)
		if w.Reason != "" {
			why += " (" + w.Reason + ")"
		}
	}
	if why == "" {
		return WorkGroup{}, guStatus(codes.NotFound, ReasonGUQuotaNotExists, fmt.Sprintf(
			"%s: GU quota %s of tenant %s has no WorkGroup to run work on (a background quota has none, nor a root without a WorkGroup quota below it); name a quota that has one",
			MsgGUQuotaNotExists, none, tenantID))
	}
	return WorkGroup{}, guStatus(codes.FailedPrecondition, ReasonGUQuotaCreating,
		MsgGUQuotaCreating+": "+why+"; retry once it runs")
}

// The two answers of the submit-time GU check begin with the names the
// design gives these errors (docs/api/quota.md#the-submit-time-gu-check),
// so a client matching either finds it.
const (
	MsgGUQuotaNotExists = "GU Quota Not Exists"
	MsgGUQuotaCreating  = "GU Quota创建中 (the GU quota is being created)"
)

// GUQuotaNotExists is CheckGUQuota's NotFound answer.
func GUQuotaNotExists(tenantID, quota string) error {
	msg := fmt.Sprintf("%s: tenant %s has no GU quota %q", MsgGUQuotaNotExists, tenantID, quota)
	if quota == "" {
		msg = fmt.Sprintf("%s: tenant %s has no GU quota", MsgGUQuotaNotExists, tenantID)
	}
	return guStatus(codes.NotFound, ReasonGUQuotaNotExists, msg)
}

// workGroupQuota finds the quota whose WorkGroup serves q among all, its
// tree's quotas in creation order: a root's is its first open child with a
// WorkGroup — the first non-background second-level quota the request
// named, or added after it — so a root with several names the same one
// every time (docs/api/quota.md#quotas). A root being unsubscribed, or
// deleted, is served the same way by the children that closed with it.
func workGroupQuota(q capacity.Quota, all []capacity.Quota, byID map[string]capacity.Quota) (capacity.Quota, bool) {
	switch {
	case q.Level == 1:
		for _, c := range all {
			if c.ParentID == q.ID && c.HasWorkGroup() && (c.Open() || closedWith(c, q)) {
				return c, true
			}
		}
		return capacity.Quota{}, false
	case q.Level > 2:
		for q.Level > 2 {
			p, ok := byID[q.ParentID]
			if !ok {
				return capacity.Quota{}, false
			}
			q = p
		}
	}
	return q, q.HasWorkGroup()
}

// closedWith reports whether child c of root was unsubscribed with it,
// not before it: the root is not open, and c's last change is no older
// than the root's. An unsubscription records every quota of the subtree
// at one time, and deletes them at one time once their WorkGroups are
// gone, while a child unsubscribed on its own earlier has older changes.
func closedWith(c, root capacity.Quota) bool {
	return !root.Open() && !c.Open() && !c.UpdatedAt.Before(root.UpdatedAt)
}

// guStatus builds the check's error: an ErrorInfo with the reason only
// (no business code of its own), which the gateway reads as the task API's
// taskv1.ErrorCode of that name (30010, 30011).
func guStatus(c codes.Code, reason, msg string) error {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Domain: grpcserver.ErrorDomain, Reason: reason})
	if err != nil {
		return status.Error(c, msg)
	}
	return st.Err()
}

// CurrentWorkGroups lists every WorkGroup that is not Deleted, with its
// status, for admission: a Running one's GPUs are the capacity its GU
// quota holds, and the queue of one that stopped running admits nothing
// new (docs/api/quota.md#workgroup-queues). WatchWorkGroups says when to
// read it again.
func (a *App) CurrentWorkGroups(ctx context.Context) ([]WorkGroup, error) {
	ws, err := a.store.WorkGroups(ctx, "", "")
	if err != nil {
		return nil, err
	}
	out := make([]WorkGroup, 0, len(ws))
	for _, w := range ws {
		if w.Status != capacity.StatusDeleted {
			out = append(out, workGroupOf(w))
		}
	}
	return out, nil
}

// guQuotasOf selects the tenant's GU quotas, in creation order
// (workGroupQuota).
func guQuotasOf(tenant string) QuotaFilter {
	return QuotaFilter{TenantID: tenant, Kind: string(capacity.KindGU), CreationOrder: true}
}
