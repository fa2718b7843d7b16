package app_test

import (
	"errors"
	"testing"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

func TestRegisterTenant(t *testing.T) {
	f := newFixture(t)
	if _, err := f.app.RegisterTenant(f.ctx, acme, "acme", "Acme"); !errors.Is(err, app.ErrForbidden) {
		t.Fatalf("a tenant's key registered a tenant: %v", err)
	}
	if n := len(f.store.Events(0)); n != 0 {
		t.Fatalf("a refused registration recorded %d events", n)
	}
	steps := []struct {
		name, tenantName string
		want             []string
	}{
		{"new", "Acme", []string{"tenant/acme TenantCreated"}},
		{"same name again", "Acme", nil},
		{"rename", "ACME", []string{"tenant/acme TenantRenamed"}},
	}
	for _, s := range steps {
		mark := len(f.store.Events(0))
		tn, err := f.app.RegisterTenant(f.ctx, admin, "acme", s.tenantName)
		if err != nil || tn.ID != "acme" || tn.Name != s.tenantName {
			t.Fatalf("%s: RegisterTenant = %+v, %v", s.name, tn, err)
		}
		wantEvents(t, s.name, eventNames(f.store.Events(mark)), s.want...)
	}
	if _, err := f.app.RegisterTenant(f.ctx, admin, "acme", ""); !errors.Is(err, capacity.ErrInvalid) {
		t.Errorf("a tenant without a name: %v, want ErrInvalid", err)
	}
	// Recorded as the operator's, with the address of its request.
	for _, c := range f.store.Committed() {
		if c.Actor != admin.Actor {
			t.Errorf("event %s recorded by %+v, want %+v", c.Event.Aggregate, c.Actor, admin.Actor)
		}
	}
}

func TestTenantReads(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	if tn, err := f.app.GetTenant(f.ctx, acme, "acme"); err != nil || tn.Name != "Tenant acme" {
		t.Errorf("a tenant reads itself: %+v, %v", tn, err)
	}
	// Another tenant's record does not exist for a tenant's key.
	if _, err := f.app.GetTenant(f.ctx, acme, "beta"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("acme read beta: %v, want ErrNotFound", err)
	}
	if _, err := f.app.GetTenant(f.ctx, admin, "nobody"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("an unknown tenant: %v, want ErrNotFound", err)
	}
	if _, err := f.app.ListTenants(f.ctx, acme); !errors.Is(err, app.ErrForbidden) {
		t.Errorf("a tenant's key listed tenants: %v", err)
	}
	ts, err := f.app.ListTenants(f.ctx, admin)
	if err != nil || len(ts) != 2 || ts[0].ID != "acme" || ts[1].ID != "beta" {
		t.Errorf("ListTenants = %+v, %v; want acme, beta", ts, err)
	}
}

func TestClustersAndInventory(t *testing.T) {
	f := newFixture(t)
	if _, err := f.app.CreateCluster(f.ctx, acme, "c1", ""); !errors.Is(err, app.ErrForbidden) {
		t.Fatalf("a tenant's key created a cluster: %v", err)
	}
	cl, err := f.app.CreateCluster(f.ctx, admin, "c1", "GPU cluster")
	if err != nil || cl.Name != "c1" || cl.Description != "GPU cluster" {
		t.Fatalf("CreateCluster = %+v, %v", cl, err)
	}
	if _, err := f.app.CreateCluster(f.ctx, admin, "c1", ""); !errors.Is(err, capacity.ErrExists) {
		t.Errorf("a second cluster c1: %v, want ErrExists", err)
	}
	if _, err := f.app.SetInventory(f.ctx, acme, "c1", "A100", 8); !errors.Is(err, app.ErrForbidden) {
		t.Errorf("a tenant's key set inventory: %v", err)
	}
	if _, err := f.app.SetInventory(f.ctx, admin, "c9", "A100", 8); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("inventory of an unknown cluster: %v, want ErrNotFound", err)
	}
	inv, err := f.app.SetInventory(f.ctx, admin, "c1", "A100", 8)
	if err != nil || inv.MachineType != "A100" || inv.Total != 8 || inv.Available() != 8 {
		t.Fatalf("SetInventory = %+v, %v; want 8 free A100", inv, err)
	}
	mark := len(f.store.Events(0))
	if _, err := f.app.SetInventory(f.ctx, admin, "c1", "A100", 8); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "the same inventory again", eventNames(f.store.Events(mark)))
	// Any caller reads clusters: the inventory is what a tenant checks
	// before buying a quota.
	got, err := f.app.GetCluster(f.ctx, acme, "c1")
	if err != nil || got.Inventory["A100"].Total != 8 {
		t.Errorf("GetCluster = %+v, %v", got, err)
	}
	if _, err := f.app.GetCluster(f.ctx, acme, "c9"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("an unknown cluster: %v, want ErrNotFound", err)
	}
	if cls, err := f.app.ListClusters(f.ctx, beta); err != nil || len(cls) != 1 || cls[0].Name != "c1" {
		t.Errorf("ListClusters = %+v, %v", cls, err)
	}
}

// Inventory cannot go below what quotas hold.
func TestInventoryBelowReservations(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 6, 8)
	mark := len(f.store.Events(0))
	if _, err := f.app.SetInventory(f.ctx, admin, "c1", "A100", 5); !errors.Is(err, capacity.ErrConflict) {
		t.Fatalf("inventory below the 6 reserved: %v, want ErrConflict", err)
	}
	wantEvents(t, "the refused inventory", eventNames(f.store.Events(mark)))
	if inv, err := f.app.SetInventory(f.ctx, admin, "c1", "A100", 6); err != nil || inv.Allocated != 6 || inv.Available() != 0 {
		t.Errorf("inventory down to what is reserved = %+v, %v", inv, err)
	}
}
