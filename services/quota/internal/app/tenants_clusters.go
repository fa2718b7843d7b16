package app

import (
	"context"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// RegisterTenant records or renames a tenant (operators only).
func (a *App) RegisterTenant(ctx context.Context, c Caller, id, name string) (capacity.Tenant, error) {
	if err := requireAdmin(c); err != nil {
		return capacity.Tenant{}, err
	}
	var out capacity.Tenant
	_, err := a.store.Update(ctx, c.Actor, func(tx Tx) error {
		t, err := tx.Tenant(id)
		if err != nil {
			return err
		}
		events, err := capacity.RegisterTenant(t, id, name, a.clock())
		if err != nil {
			return err
		}
		if err := tx.Record(events...); err != nil {
			return err
		}
		out, err = tx.Tenant(id)
		return err
	})
	return out, err
}

// GetTenant returns a tenant; a tenant's key sees only itself.
func (a *App) GetTenant(ctx context.Context, c Caller, id string) (capacity.Tenant, error) {
	if !visible(c, id) {
		return capacity.Tenant{}, capacity.NotFound("tenant", id)
	}
	return a.store.Tenant(ctx, id)
}

// ListTenants lists every tenant (operators only).
func (a *App) ListTenants(ctx context.Context, c Caller) ([]capacity.Tenant, error) {
	if err := requireAdmin(c); err != nil {
		return nil, err
	}
	return a.store.Tenants(ctx)
}

// CreateCluster records a compute cluster (operators only).
func (a *App) CreateCluster(ctx context.Context, c Caller, name, description string) (capacity.Cluster, error) {
	if err := requireAdmin(c); err != nil {
		return capacity.Cluster{}, err
	}
	var out capacity.Cluster
	_, err := a.store.Update(ctx, c.Actor, func(tx Tx) error {
		cl, err := tx.Cluster(name)
		if err != nil {
			return err
		}
		events, err := capacity.CreateCluster(cl, name, description, a.clock())
		if err != nil {
			return err
		}
		if err := tx.Record(events...); err != nil {
			return err
		}
		out, err = tx.Cluster(name)
		return err
	})
	return out, err
}

// GetCluster returns a cluster with its inventory (any caller: inventory is
// what a tenant checks before buying a quota).
func (a *App) GetCluster(ctx context.Context, _ Caller, name string) (capacity.Cluster, error) {
	return a.store.Cluster(ctx, name)
}

// ListClusters lists every cluster.
func (a *App) ListClusters(ctx context.Context, _ Caller) ([]capacity.Cluster, error) {
	return a.store.Clusters(ctx)
}

// SetInventory sets a cluster's GPUs of a machine type (operators only).
func (a *App) SetInventory(ctx context.Context, c Caller, cluster, machineType string, total int64) (capacity.Inventory, error) {
	if err := requireAdmin(c); err != nil {
		return capacity.Inventory{}, err
	}
	var out capacity.Inventory
	_, err := a.store.Update(ctx, c.Actor, func(tx Tx) error {
		cl, err := tx.Cluster(cluster)
		if err != nil {
			return err
		}
		if !cl.Exists() {
			return capacity.NotFound("cluster", cluster)
		}
		events, err := capacity.SetInventory(cl, machineType, total, a.clock())
		if err != nil {
			return err
		}
		if err := tx.Record(events...); err != nil {
			return err
		}
		cl, err = tx.Cluster(cluster)
		out = cl.Inventory[machineType]
		return err
	})
	return out, err
}
