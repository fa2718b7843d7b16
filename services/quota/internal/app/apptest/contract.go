package apptest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// ContractStore is what StoreContract checks: the use cases' store and
// the process manager's.
type ContractStore interface {
	app.Store
	app.ProcessStore
}

// at is the time of every event the contract records (microseconds, UTC:
// what the use cases' clock gives and Postgres keeps).
var at = time.Date(2026, 11, 22, 5, 0, 0, 123000, time.UTC)

// StoreContract runs the behaviour every app.Store must have on stores
// newStore returns; each subtest gets a new, empty one.
func StoreContract(t *testing.T, newStore func(t *testing.T) ContractStore) {
	tests := []struct {
		name string
		run  func(t *testing.T, s ContractStore)
	}{
		{"versions count each aggregate's events", contractVersions},
		{"a transaction reads its own records", contractReadOwnRecords},
		{"an error records nothing", contractErrorRecordsNothing},
		{"missing things are not found", contractNotFound},
		{"quota queries filter and page by id", contractQuotaQueries},
		{"transaction lists select committed quotas", contractTxLists},
		{"quotas list in creation order", contractCreationOrder},
		{"WorkGroups and Ray clusters", contractWorkGroupsAndRays},
		{"pending work", contractPending},
		{"open quota names are unique per tenant", contractUniqueNames},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

// contractActor records the suite's events.
var contractActor = app.Actor{ID: "contract"}

// record commits events in one Update and fails the test on an error.
func record(t *testing.T, s ContractStore, events ...capacity.Event) []capacity.Event {
	t.Helper()
	got, err := s.Update(context.Background(), contractActor, func(tx app.Tx) error { return tx.Record(events...) })
	if err != nil {
		t.Fatalf("record %d events: %v", len(events), err)
	}
	return got
}

func ev(aggregate, tenant string, data any) capacity.Event {
	return capacity.Event{Aggregate: aggregate, TenantID: tenant, At: at, Data: data}
}

// quotaCreated is the event creating quota id of tenant on cluster c1,
// Active; change adjusts it.
func quotaCreated(tenant, id, name, parent, root string, level int, kind capacity.Kind, change ...func(*capacity.QuotaCreated)) capacity.Event {
	d := capacity.QuotaCreated{ID: id, Name: name, Kind: kind, Cluster: "c1", Level: level, ParentID: parent, RootID: root,
		MachineType: "A100", Min: 1, Max: 2}
	for _, c := range change {
		c(&d)
	}
	return ev(capacity.QuotaAggregate(id), tenant, d)
}

func ids(qs []capacity.Quota) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.ID
	}
	return out
}

func wantIDs(t *testing.T, what string, got []capacity.Quota, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if g := ids(got); !slices.Equal(g, want) {
		t.Errorf("%s = %v, want %v", what, g, want)
	}
}

func contractVersions(t *testing.T, s ContractStore) {
	ctx := context.Background()
	got := record(t, s,
		ev(capacity.TenantAggregate("ta"), "ta", capacity.TenantCreated{Name: "A"}),
		ev(capacity.ClusterAggregate("c1"), "", capacity.ClusterCreated{Name: "c1"}),
		ev(capacity.ClusterAggregate("c1"), "", capacity.InventorySet{MachineType: "A100", Total: 8}),
	)
	var versions []int64
	for _, e := range got {
		versions = append(versions, e.Version)
	}
	if !slices.Equal(versions, []int64{1, 1, 2}) {
		t.Errorf("recorded versions = %v, want [1 1 2]", versions)
	}
	got = record(t, s, ev(capacity.TenantAggregate("ta"), "ta", capacity.TenantRenamed{Name: "AA"}))
	if len(got) != 1 || got[0].Version != 2 {
		t.Errorf("rename recorded %+v, want one event at version 2", got)
	}
	tn, err := s.Tenant(ctx, "ta")
	if err != nil || tn.ID != "ta" || tn.Name != "AA" || tn.Version != 2 || !tn.CreatedAt.Equal(at) {
		t.Errorf("Tenant = %+v, %v; want ta named AA at version 2", tn, err)
	}
	cl, err := s.Cluster(ctx, "c1")
	if err != nil || cl.Version != 2 || cl.Inventory["A100"].Total != 8 {
		t.Errorf("Cluster = %+v, %v; want version 2 with 8 A100", cl, err)
	}
	record(t, s, ev(capacity.TenantAggregate("tb"), "tb", capacity.TenantCreated{Name: "B"}),
		ev(capacity.ClusterAggregate("c0"), "", capacity.ClusterCreated{Name: "c0"}))
	tenants, err := s.Tenants(ctx)
	if err != nil || len(tenants) != 2 || tenants[0].ID != "ta" || tenants[1].ID != "tb" {
		t.Errorf("Tenants = %+v, %v; want ta, tb", tenants, err)
	}
	clusters, err := s.Clusters(ctx)
	if err != nil || len(clusters) != 2 || clusters[0].Name != "c0" || clusters[1].Name != "c1" {
		t.Errorf("Clusters = %+v, %v; want c0, c1", clusters, err)
	}
}

func contractReadOwnRecords(t *testing.T, s ContractStore) {
	_, err := s.Update(context.Background(), contractActor, func(tx app.Tx) error {
		before, err := tx.Tenant("ta")
		if err != nil || before.Exists() {
			return fmt.Errorf("before recording: %+v, %v; want a zero tenant", before, err)
		}
		if err := tx.Record(ev(capacity.TenantAggregate("ta"), "ta", capacity.TenantCreated{Name: "A"})); err != nil {
			return err
		}
		if err := tx.Record(ev(capacity.TenantAggregate("ta"), "ta", capacity.TenantRenamed{Name: "AA"})); err != nil {
			return err
		}
		after, err := tx.Tenant("ta")
		if err != nil || after.Name != "AA" || after.Version != 2 {
			return fmt.Errorf("after recording: %+v, %v; want AA at version 2", after, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func contractErrorRecordsNothing(t *testing.T, s ContractStore) {
	ctx := context.Background()
	boom := errors.New("boom")
	got, err := s.Update(ctx, contractActor, func(tx app.Tx) error {
		if err := tx.Record(ev(capacity.TenantAggregate("ta"), "ta", capacity.TenantCreated{Name: "A"})); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || got != nil {
		t.Errorf("Update = %v, %v; want nothing and the function's error", got, err)
	}
	if _, err := s.Tenant(ctx, "ta"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("Tenant after a failed update: %v, want ErrNotFound", err)
	}
	// The aggregate starts again at version 1.
	if got := record(t, s, ev(capacity.TenantAggregate("ta"), "ta", capacity.TenantCreated{Name: "A"})); got[0].Version != 1 {
		t.Errorf("first committed version = %d, want 1", got[0].Version)
	}
}

func contractNotFound(t *testing.T, s ContractStore) {
	ctx := context.Background()
	reads := map[string]func() error{
		"Tenant":     func() error { _, err := s.Tenant(ctx, "nobody"); return err },
		"Cluster":    func() error { _, err := s.Cluster(ctx, "nowhere"); return err },
		"Quota":      func() error { _, err := s.Quota(ctx, "q-none"); return err },
		"WorkGroup":  func() error { _, err := s.WorkGroup(ctx, "q-none"); return err },
		"RayCluster": func() error { _, err := s.Ray(ctx, "nobody", "nowhere"); return err },
	}
	for name, read := range reads {
		if err := read(); !errors.Is(err, capacity.ErrNotFound) {
			t.Errorf("%s of nothing: %v, want ErrNotFound", name, err)
		}
	}
	for name, list := range map[string]func() (int, error){
		"Tenants":    func() (int, error) { x, err := s.Tenants(ctx); return len(x), err },
		"Clusters":   func() (int, error) { x, err := s.Clusters(ctx); return len(x), err },
		"Quotas":     func() (int, error) { x, err := s.Quotas(ctx, app.QuotaFilter{}); return len(x), err },
		"WorkGroups": func() (int, error) { x, err := s.WorkGroups(ctx, "", ""); return len(x), err },
	} {
		if n, err := list(); n != 0 || err != nil {
			t.Errorf("%s of an empty store = %d, %v; want none", name, n, err)
		}
	}
	_, err := s.Update(ctx, contractActor, func(tx app.Tx) error {
		tn, err1 := tx.Tenant("nobody")
		cl, err2 := tx.Cluster("nowhere")
		q, err3 := tx.Quota("q-none")
		r, err4 := tx.Ray("nobody", "nowhere")
		w, err5 := tx.WorkGroup("q-none")
		if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
			return err
		}
		if tn.Exists() || cl.Exists() || q.Exists() || r.Exists() || w.Exists() {
			return errors.New("a transaction read an aggregate with no event as existing")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// seedQuotas records two tenants' quota trees on clusters c1 and c2:
//
//	ta: qa1 (GU root) ─┬ qa1x ── qa1xa
//	                   └ qa1y (Provisioning)
//	    qa2 (CU root, Deleted)
//	tb: qb1 (GU root on c2)
func seedQuotas(t *testing.T, s ContractStore) {
	t.Helper()
	record(t, s,
		quotaCreated("ta", "qa1", "ga", "", "qa1", 1, capacity.KindGU),
		quotaCreated("ta", "qa1x", "gx", "qa1", "qa1", 2, capacity.KindGU),
		quotaCreated("ta", "qa1y", "gy", "qa1", "qa1", 2, capacity.KindGU, func(d *capacity.QuotaCreated) { d.Provisioning = true }),
		quotaCreated("ta", "qa1xa", "gxa", "qa1x", "qa1", 3, capacity.KindGU),
		quotaCreated("ta", "qa2", "cu", "", "qa2", 1, capacity.KindCU),
		ev(capacity.QuotaAggregate("qa2"), "ta", capacity.QuotaUnsubscribed{Reason: "r"}),
		ev(capacity.QuotaAggregate("qa2"), "ta", capacity.QuotaDeleted{}),
		quotaCreated("tb", "qb1", "gb", "", "qb1", 1, capacity.KindGU, func(d *capacity.QuotaCreated) { d.Cluster = "c2" }),
	)
}

func contractQuotaQueries(t *testing.T, s ContractStore) {
	ctx := context.Background()
	seedQuotas(t, s)
	tests := []struct {
		name string
		f    app.QuotaFilter
		want []string
	}{
		{"everything", app.QuotaFilter{}, []string{"qa1", "qa1x", "qa1xa", "qa1y", "qa2", "qb1"}},
		{"a tenant's", app.QuotaFilter{TenantID: "ta"}, []string{"qa1", "qa1x", "qa1xa", "qa1y", "qa2"}},
		{"a cluster's", app.QuotaFilter{Cluster: "c2"}, []string{"qb1"}},
		{"a kind", app.QuotaFilter{Kind: "CU"}, []string{"qa2"}},
		{"a status", app.QuotaFilter{Status: capacity.QuotaProvisioning}, []string{"qa1y"}},
		{"a tree", app.QuotaFilter{RootID: "qa1"}, []string{"qa1", "qa1x", "qa1xa", "qa1y"}},
		{"roots", app.QuotaFilter{RootsOnly: true}, []string{"qa1", "qa2", "qb1"}},
		{"a tenant's GU roots", app.QuotaFilter{TenantID: "ta", Kind: "GU", RootsOnly: true}, []string{"qa1"}},
		{"first page", app.QuotaFilter{Limit: 2}, []string{"qa1", "qa1x"}},
		{"next page", app.QuotaFilter{After: "qa1x", Limit: 2}, []string{"qa1xa", "qa1y"}},
		{"last page", app.QuotaFilter{After: "qa2", Limit: 2}, []string{"qb1"}},
		{"nothing", app.QuotaFilter{TenantID: "nobody"}, nil},
	}
	for _, tt := range tests {
		got, err := s.Quotas(ctx, tt.f)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		wantIDs(t, tt.name, got, tt.want...)
	}
	q, err := s.Quota(ctx, "qa2")
	if err != nil || q.Status != capacity.QuotaDeletedStatus || q.Version != 3 || q.TenantID != "ta" || q.Kind != capacity.KindCU {
		t.Errorf("Quota(qa2) = %+v, %v; want the Deleted CU quota of ta at version 3", q, err)
	}
}

func contractTxLists(t *testing.T, s ContractStore) {
	seedQuotas(t, s)
	_, err := s.Update(context.Background(), contractActor, func(tx app.Tx) error {
		root, err := tx.Quota("qa1")
		if err != nil {
			return err
		}
		children, err := tx.Children("qa1")
		if err != nil {
			return err
		}
		wantIDs(t, "Children(qa1)", children, "qa1x", "qa1y")
		tenant, err := tx.TenantQuotas("ta")
		if err != nil {
			return err
		}
		wantIDs(t, "TenantQuotas(ta)", tenant, "qa1", "qa1x", "qa1y", "qa1xa")
		subtree, err := tx.Subtree(root)
		if err != nil {
			return err
		}
		wantIDs(t, "Subtree(qa1)", subtree, "qa1x", "qa1y", "qa1xa")
		leaf, err := tx.Quota("qa1xa")
		if err != nil {
			return err
		}
		none, err := tx.Subtree(leaf)
		if err != nil {
			return err
		}
		wantIDs(t, "Subtree(qa1xa)", none)
		// States come from the transaction: a change recorded here shows
		// in the next list.
		if err := tx.Record(ev(capacity.QuotaAggregate("qa1x"), "ta", capacity.QuotaUpdated{Min: 5, Max: 6})); err != nil {
			return err
		}
		children, err = tx.Children("qa1")
		if err != nil {
			return err
		}
		if children[0].Max != 6 || children[0].Version != 2 {
			return fmt.Errorf("Children after recording = %+v, want qa1x with max 6 at version 2", children[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// contractCreationOrder: a tree's quotas listed in the order they were
// created — each production's in the order it recorded them, then later
// ones — whatever their ids, by Quotas with CreationOrder and by a
// transaction's lists (after the level).
func contractCreationOrder(t *testing.T, s ContractStore) {
	ctx := context.Background()
	record(t, s,
		quotaCreated("ta", "qc1", "root", "", "qc1", 1, capacity.KindGU),
		quotaCreated("ta", "qc1z", "first", "qc1", "qc1", 2, capacity.KindGU),
		quotaCreated("ta", "qc1zz", "first-below", "qc1z", "qc1", 3, capacity.KindGU),
		quotaCreated("ta", "qc1m", "second", "qc1", "qc1", 2, capacity.KindGU),
		quotaCreated("ta", "qc1a", "third", "qc1", "qc1", 2, capacity.KindGU),
	)
	record(t, s, quotaCreated("ta", "qc1b", "fourth", "qc1", "qc1", 2, capacity.KindGU))
	got, err := s.Quotas(ctx, app.QuotaFilter{RootID: "qc1", CreationOrder: true})
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "the tree in creation order", got, "qc1", "qc1z", "qc1zz", "qc1m", "qc1a", "qc1b")
	if got, err = s.Quotas(ctx, app.QuotaFilter{RootID: "qc1"}); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "the tree by id", got, "qc1", "qc1a", "qc1b", "qc1m", "qc1z", "qc1zz")
	_, err = s.Update(ctx, contractActor, func(tx app.Tx) error {
		root, err := tx.Quota("qc1")
		if err != nil {
			return err
		}
		children, err := tx.Children("qc1")
		if err != nil {
			return err
		}
		wantIDs(t, "Children(qc1)", children, "qc1z", "qc1m", "qc1a", "qc1b")
		subtree, err := tx.Subtree(root)
		if err != nil {
			return err
		}
		wantIDs(t, "Subtree(qc1)", subtree, "qc1z", "qc1m", "qc1a", "qc1b", "qc1zz")
		tenant, err := tx.TenantQuotas("ta")
		if err != nil {
			return err
		}
		wantIDs(t, "TenantQuotas(ta)", tenant, "qc1", "qc1z", "qc1m", "qc1a", "qc1b", "qc1zz")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func workGroupProvisioning(tenant, quotaID string) capacity.Event {
	return ev(capacity.WorkGroupAggregate(quotaID), tenant, capacity.WorkGroupProvisioning{WorkGroupID: "wg-" + quotaID,
		QuotaID: quotaID, QuotaName: "n-" + quotaID, RayCluster: "ray-" + tenant, Cluster: "c1", MachineType: "A100", GPUs: 2})
}

func rayProvisioning(tenant, cluster string) capacity.Event {
	return ev(capacity.RayAggregate(tenant, cluster), tenant, capacity.RayClusterProvisioning{Cluster: cluster, RayName: "ray-" + tenant})
}

func contractWorkGroupsAndRays(t *testing.T, s ContractStore) {
	ctx := context.Background()
	record(t, s,
		workGroupProvisioning("ta", "qa2"),
		workGroupProvisioning("ta", "qa1"),
		workGroupProvisioning("tb", "qb1"),
		ev(capacity.WorkGroupAggregate("qb1"), "tb", capacity.WorkGroupRunning{GPUs: 2}),
		rayProvisioning("ta", "c1"),
		ev(capacity.RayAggregate("ta", "c1"), "ta", capacity.RayClusterApplied{}),
	)
	list := func(tenant, status string) []string {
		ws, err := s.WorkGroups(ctx, tenant, status)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, w := range ws {
			out = append(out, w.QuotaID)
		}
		return out
	}
	for _, tt := range []struct {
		tenant, status string
		want           []string
	}{
		{"", "", []string{"qa1", "qa2", "qb1"}},
		{"ta", "", []string{"qa1", "qa2"}},
		{"", capacity.StatusRunning, []string{"qb1"}},
		{"ta", capacity.StatusRunning, []string{}},
	} {
		if got := list(tt.tenant, tt.status); !slices.Equal(got, tt.want) {
			t.Errorf("WorkGroups(%q, %q) = %v, want %v", tt.tenant, tt.status, got, tt.want)
		}
	}
	w, err := s.WorkGroup(ctx, "qb1")
	if err != nil || w.ID != "wg-qb1" || w.TenantID != "tb" || w.Status != capacity.StatusRunning || w.Version != 2 {
		t.Errorf("WorkGroup(qb1) = %+v, %v; want wg-qb1 of tb Running at version 2", w, err)
	}
	r, err := s.Ray(ctx, "ta", "c1")
	if err != nil || r.Name != "ray-ta" || !r.Applied || r.Status != capacity.StatusCreating || r.Version != 2 {
		t.Errorf("Ray(ta, c1) = %+v, %v; want ray-ta applied, Creating, at version 2", r, err)
	}
}

func contractPending(t *testing.T, s ContractStore) {
	ctx := context.Background()
	seedQuotas(t, s)
	record(t, s,
		ev(capacity.QuotaAggregate("qa1"), "ta", capacity.QuotaProductionFailed{Reason: "r"}),
		ev(capacity.QuotaAggregate("qb1"), "tb", capacity.QuotaUnsubscribed{Reason: "r"}),
		rayProvisioning("tb", "c2"),
		rayProvisioning("ta", "c1"),
		rayProvisioning("ta", "c2"),
		ev(capacity.RayAggregate("ta", "c2"), "ta", capacity.RayClusterRunning{}),
		workGroupProvisioning("ta", "qa1y"),
		workGroupProvisioning("ta", "qa1x"),
		ev(capacity.WorkGroupAggregate("qa1x"), "ta", capacity.WorkGroupRunning{GPUs: 2}),
		workGroupProvisioning("tb", "qb1"),
		ev(capacity.WorkGroupAggregate("qb1"), "tb", capacity.WorkGroupDeleting{}),
	)
	p, err := s.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rays, wgs []string
	for _, r := range p.Rays {
		rays = append(rays, r.TenantID+"/"+r.Cluster)
	}
	for _, w := range p.WorkGroups {
		wgs = append(wgs, w.QuotaID+" "+w.Status)
	}
	if want := []string{"ta/c1", "tb/c2"}; !slices.Equal(rays, want) {
		t.Errorf("pending Ray clusters = %v, want %v", rays, want)
	}
	if want := []string{"qa1y Creating", "qb1 Deleting"}; !slices.Equal(wgs, want) {
		t.Errorf("pending WorkGroups = %v, want %v", wgs, want)
	}
	// Deepest first, then by id.
	wantIDs(t, "pending quotas", p.Quotas, "qa1y", "qa1", "qb1")
}

func contractUniqueNames(t *testing.T, s ContractStore) {
	ctx := context.Background()
	record(t, s, quotaCreated("ta", "qa1", "same", "", "qa1", 1, capacity.KindGU))
	_, err := s.Update(ctx, contractActor, func(tx app.Tx) error {
		return tx.Record(quotaCreated("ta", "qa2", "same", "", "qa2", 1, capacity.KindGU))
	})
	if !errors.Is(err, capacity.ErrExists) {
		t.Fatalf("a second open quota named same: %v, want ErrExists", err)
	}
	if _, err := s.Quota(ctx, "qa2"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("the refused quota was recorded: %v", err)
	}
	// Another tenant may use the name; so may ta once its quota is Deleted.
	record(t, s, quotaCreated("tb", "qb1", "same", "", "qb1", 1, capacity.KindGU))
	record(t, s, ev(capacity.QuotaAggregate("qa1"), "ta", capacity.QuotaUnsubscribed{}),
		ev(capacity.QuotaAggregate("qa1"), "ta", capacity.QuotaDeleted{}))
	record(t, s, quotaCreated("ta", "qa3", "same", "", "qa3", 1, capacity.KindGU))
}
