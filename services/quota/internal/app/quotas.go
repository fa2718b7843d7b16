package app

import (
	"context"
	"errors"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// QuotaView is a quota with its WorkGroup (if it has one) and, for single
// reads, its subtree.
type QuotaView struct {
	Quota     capacity.Quota
	WorkGroup *capacity.WorkGroup
	Children  []QuotaView
}

// CreateQuota produces a quota (operators only): it records the quotas, the
// inventory they take, and the Ray cluster and WorkGroups to create, in one
// transaction, and answers at once; the process manager does the rest.
func (a *App) CreateQuota(ctx context.Context, c Caller, cmd capacity.CreateQuota) (QuotaView, error) {
	if err := requireAdmin(c); err != nil {
		return QuotaView{}, err
	}
	var id string
	events, err := a.store.Update(ctx, c.Actor, func(tx Tx) error {
		st := capacity.ProductionState{NewID: a.newID, Now: a.clock()}
		var err error
		if cmd.ParentID != "" {
			if st.Parent, err = tx.Quota(cmd.ParentID); err != nil {
				return err
			}
			if !st.Parent.Exists() || st.Parent.Status == capacity.QuotaDeletedStatus {
				return capacity.NotFound("quota", cmd.ParentID)
			}
			if cmd.TenantID == "" {
				cmd.TenantID = st.Parent.TenantID
			}
			if st.Parent.Exists() && st.Parent.TenantID != cmd.TenantID {
				return capacity.NotFound("quota", cmd.ParentID)
			}
			if st.Siblings, err = tx.Children(cmd.ParentID); err != nil {
				return err
			}
			if st.Anchor, st.AnchorWorkGroup, err = anchorOf(tx, st.Parent); err != nil {
				return err
			}
		}
		if st.Tenant, err = tx.Tenant(cmd.TenantID); err != nil {
			return err
		}
		cluster := cmd.Cluster
		if cluster == "" {
			cluster = st.Parent.Cluster
		}
		if st.Cluster, err = tx.Cluster(cluster); err != nil {
			return err
		}
		if st.TenantQuotas, err = tx.TenantQuotas(cmd.TenantID); err != nil {
			return err
		}
		if st.Ray, err = tx.Ray(cmd.TenantID, cluster); err != nil {
			return err
		}
		events, err := capacity.Produce(cmd, st)
		if err != nil {
			return err
		}
		for _, e := range events {
			if qc, ok := e.Data.(capacity.QuotaCreated); ok {
				id = qc.ID
				break
			}
		}
		return tx.Record(events...)
	})
	if err != nil {
		return QuotaView{}, err
	}
	a.followWorkGroups(ctx, events)
	return a.GetQuota(ctx, c, id)
}

// anchorOf returns the WorkGroup quota at or above q (its second-level
// ancestor, if that one has a WorkGroup) and the WorkGroup.
func anchorOf(tx Tx, q capacity.Quota) (capacity.Quota, capacity.WorkGroup, error) {
	for q.Level > 2 {
		p, err := tx.Quota(q.ParentID)
		if err != nil {
			return capacity.Quota{}, capacity.WorkGroup{}, err
		}
		q = p
	}
	if q.Level != 2 || !q.HasWorkGroup() {
		return capacity.Quota{}, capacity.WorkGroup{}, nil
	}
	wg, err := tx.WorkGroup(q.ID)
	return q, wg, err
}

// UpdateQuota changes a quota's limits (operators only): those given; a
// nil one keeps its value, and with neither the quota is answered as it
// is, nothing recorded (docs/api/quota.md#quotas).
func (a *App) UpdateQuota(ctx context.Context, c Caller, id string, min, max *int64) (QuotaView, error) {
	if err := requireAdmin(c); err != nil {
		return QuotaView{}, err
	}
	if min == nil && max == nil {
		return a.GetQuota(ctx, c, id)
	}
	events, err := a.store.Update(ctx, c.Actor, func(tx Tx) error {
		st := capacity.UpdateState{Now: a.clock()}
		var err error
		if st.Quota, err = tx.Quota(id); err != nil {
			return err
		}
		if !st.Quota.Exists() {
			return capacity.NotFound("quota", id)
		}
		if st.Quota.ParentID != "" {
			if st.Parent, err = tx.Quota(st.Quota.ParentID); err != nil {
				return err
			}
			if st.Siblings, err = tx.Children(st.Quota.ParentID); err != nil {
				return err
			}
		}
		if st.Children, err = tx.Children(id); err != nil {
			return err
		}
		if st.Cluster, err = tx.Cluster(st.Quota.Cluster); err != nil {
			return err
		}
		if st.Anchor, st.AnchorWorkGroup, err = anchorOf(tx, st.Quota); err != nil {
			return err
		}
		newMin, newMax := st.Quota.Min, st.Quota.Max
		if min != nil {
			newMin = *min
		}
		if max != nil {
			newMax = *max
		}
		events, err := capacity.UpdateQuota(st, newMin, newMax)
		if err != nil {
			return err
		}
		return tx.Record(events...)
	})
	if err != nil {
		return QuotaView{}, err
	}
	a.followWorkGroups(ctx, events)
	return a.GetQuota(ctx, c, id)
}

// unsubscribeState reads what deciding q's unsubscription needs.
func unsubscribeState(tx Tx, q capacity.Quota) (capacity.UnsubscribeState, error) {
	st := capacity.UnsubscribeState{Quota: q, WorkGroups: map[string]capacity.WorkGroup{}}
	var err error
	if st.Subtree, err = tx.Subtree(q); err != nil {
		return st, err
	}
	for _, s := range append([]capacity.Quota{q}, st.Subtree...) {
		if !s.HasWorkGroup() {
			continue
		}
		wg, err := tx.WorkGroup(s.ID)
		if err != nil {
			return st, err
		}
		if wg.Exists() {
			st.WorkGroups[s.ID] = wg
		}
	}
	st.Ray, err = tx.Ray(q.TenantID, q.Cluster)
	return st, err
}

// DeleteQuota unsubscribes a quota and its subtree (operators only). It
// answers with the states its own transaction produced (docs/api/quota.md:
// Unsubscribing, or Deleted when nothing had to be removed): read after the
// commit, they may already be further on, as the process manager, woken by
// the commit, may have finished the unsubscription.
func (a *App) DeleteQuota(ctx context.Context, c Caller, id, reason string) (QuotaView, error) {
	if err := requireAdmin(c); err != nil {
		return QuotaView{}, err
	}
	var view QuotaView
	events, err := a.store.Update(ctx, c.Actor, func(tx Tx) error {
		q, err := tx.Quota(id)
		if err != nil {
			return err
		}
		if !q.Exists() {
			return capacity.NotFound("quota", id)
		}
		st, err := unsubscribeState(tx, q)
		if err != nil {
			return err
		}
		st.Reason, st.Now = reason, a.clock()
		events, err := capacity.Unsubscribe(st)
		if err != nil {
			return err
		}
		if err := tx.Record(events...); err != nil {
			return err
		}
		view, err = viewIn(tx, q.ID, st.Subtree)
		return err
	})
	if err != nil {
		return QuotaView{}, err
	}
	a.followWorkGroups(ctx, events)
	return view, nil
}

// viewIn builds the view of quota id with its WorkGroup and subtree (the
// quotas below it, as Tx.Subtree lists them: children in creation order,
// as GetQuota answers them) from tx's states, its
// recorded events included: what GetQuota reads once tx commits, before
// anyone else writes.
func viewIn(tx Tx, id string, subtree []capacity.Quota) (QuotaView, error) {
	children := map[string][]string{}
	for _, s := range subtree {
		children[s.ParentID] = append(children[s.ParentID], s.ID)
	}
	var build func(id string) (QuotaView, error)
	build = func(id string) (QuotaView, error) {
		q, err := tx.Quota(id)
		if err != nil {
			return QuotaView{}, err
		}
		v := QuotaView{Quota: q}
		if q.HasWorkGroup() {
			wg, err := tx.WorkGroup(id)
			if err != nil {
				return QuotaView{}, err
			}
			if wg.Exists() {
				v.WorkGroup = &wg
			}
		}
		for _, child := range children[id] {
			cv, err := build(child)
			if err != nil {
				return QuotaView{}, err
			}
			v.Children = append(v.Children, cv)
		}
		return v, nil
	}
	return build(id)
}

// GetQuota returns a quota with its WorkGroup and subtree, each quota's
// children in the order they were created; another tenant's quota is not
// found.
func (a *App) GetQuota(ctx context.Context, c Caller, id string) (QuotaView, error) {
	q, err := a.store.Quota(ctx, id)
	if err != nil {
		return QuotaView{}, err
	}
	if !visible(c, q.TenantID) {
		return QuotaView{}, capacity.NotFound("quota", id)
	}
	tree, err := a.store.Quotas(ctx, QuotaFilter{RootID: q.RootID, CreationOrder: true})
	if err != nil {
		return QuotaView{}, err
	}
	wgs, err := a.store.WorkGroups(ctx, q.TenantID, "")
	if err != nil {
		return QuotaView{}, err
	}
	byQuota := map[string]capacity.WorkGroup{}
	for _, w := range wgs {
		byQuota[w.QuotaID] = w
	}
	children := map[string][]capacity.Quota{}
	for _, x := range tree {
		children[x.ParentID] = append(children[x.ParentID], x)
	}
	var build func(capacity.Quota) QuotaView
	build = func(x capacity.Quota) QuotaView {
		v := QuotaView{Quota: x}
		if w, ok := byQuota[x.ID]; ok {
			v.WorkGroup = &w
		}
		for _, ch := range children[x.ID] {
			v.Children = append(v.Children, build(ch))
		}
		return v
	}
	return build(q), nil
}

// ListQuotas lists quotas by id, each with its WorkGroup; a tenant's key
// lists its own only. f.After, the page token, must be a page's last id
// as this API gives it: a quota the caller sees. Any other is invalid
// rather than a position to list from.
func (a *App) ListQuotas(ctx context.Context, c Caller, f QuotaFilter) ([]QuotaView, error) {
	if f.After != "" {
		q, err := a.store.Quota(ctx, f.After)
		switch {
		case errors.Is(err, capacity.ErrNotFound) || err == nil && !visible(c, q.TenantID):
			return nil, &capacity.InvalidError{Field: "page_token", Reason: "is not one this API gave"}
		case err != nil:
			return nil, err
		}
	}
	if !c.Admin {
		if f.TenantID != "" && f.TenantID != c.TenantID {
			return nil, nil
		}
		f.TenantID = c.TenantID
	}
	qs, err := a.store.Quotas(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]QuotaView, 0, len(qs))
	for _, q := range qs {
		v := QuotaView{Quota: q}
		if q.HasWorkGroup() {
			w, err := a.store.WorkGroup(ctx, q.ID)
			switch {
			case err == nil:
				v.WorkGroup = &w
			case !errors.Is(err, capacity.ErrNotFound):
				return nil, err
			}
		}
		out = append(out, v)
	}
	return out, nil
}
