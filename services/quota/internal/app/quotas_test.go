package app_test

import (
	"errors"
	"testing"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// A GU root is checked against the cluster's free GPUs first: short, it
// is refused with ErrInventoryInsufficient (the API's 31003) and nothing
// at all is recorded.
func TestCreateQuotaChecksInventory(t *testing.T) {
	f := newFixture(t)
	f.seed(4)
	mark := len(f.store.Events(0))
	_, err := f.app.CreateQuota(f.ctx, admin, capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
		Spec: capacity.Spec{Name: "gu1", Min: 8, Max: 8, MachineType: "A100"}})
	if !errors.Is(err, capacity.ErrInventoryInsufficient) {
		t.Fatalf("8 GPUs of 4: %v, want ErrInventoryInsufficient", err)
	}
	wantEvents(t, "the refused production", eventNames(f.store.Events(mark)))
	if qs, err := f.app.ListQuotas(f.ctx, admin, app.QuotaFilter{}); err != nil || len(qs) != 0 {
		t.Errorf("quotas after the refusal = %+v, %v", qs, err)
	}
	if cl, _ := f.app.GetCluster(f.ctx, admin, "c1"); cl.Inventory["A100"].Allocated != 0 {
		t.Errorf("the refusal reserved %d GPUs", cl.Inventory["A100"].Allocated)
	}
}

// Production records, in one transaction, the quotas, the inventory they
// take, and the Ray cluster and WorkGroup to create; the answer comes at
// once, Provisioning.
func TestCreateQuotaRecordsTheProduction(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	if _, err := f.app.CreateQuota(f.ctx, acme, capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
		Spec: capacity.Spec{Name: "gu1", Min: 4, Max: 8, MachineType: "A100"}}); !errors.Is(err, app.ErrForbidden) {
		t.Fatalf("a tenant's key produced a quota: %v", err)
	}
	mark := len(f.store.Events(0))
	updates := f.store.Updates()
	v := f.createGU("gu1", 4, 8)
	if n := f.store.Updates() - updates; n != 1 {
		t.Errorf("production took %d transactions, want 1", n)
	}
	wantEvents(t, "production", eventNames(f.store.Events(mark)),
		"cluster/c1 InventoryReserved", "quota/q-1 QuotaCreated", "quota/q-2 QuotaCreated", "quota/q-3 QuotaCreated",
		"ray/acme/c1 RayClusterProvisioning", "workgroup/q-2 WorkGroupProvisioning")
	if v.Quota.ID != "q-1" || v.Quota.Status != capacity.QuotaProvisioning || len(v.Children) != 2 {
		t.Fatalf("answer = %+v, want q-1 Provisioning with two children", v)
	}
	def, bg := v.Children[0], v.Children[1]
	if def.Quota.Name != "gu1-default" || def.WorkGroup == nil || def.WorkGroup.Status != capacity.StatusCreating ||
		def.WorkGroup.GPUs != 4 {
		t.Errorf("default child = %+v, want gu1-default with a Creating WorkGroup of 4 GPUs", def)
	}
	if bg.Quota.Name != "gu1-background" || !bg.Quota.Background || bg.WorkGroup != nil {
		t.Errorf("background child = %+v, want gu1-background without a WorkGroup", bg)
	}
	if cl, _ := f.app.GetCluster(f.ctx, admin, "c1"); cl.Inventory["A100"].Allocated != 4 {
		t.Errorf("reserved %d GPUs, want 4", cl.Inventory["A100"].Allocated)
	}
	ray, err := f.app.GetRayCluster(f.ctx, acme, "acme", "c1")
	if err != nil || ray.Name != capacity.RayName("acme", "c1") || ray.Status != capacity.StatusCreating {
		t.Errorf("Ray cluster = %+v, %v; want one Creating", ray, err)
	}
}

func TestCreateQuotaRefusals(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	gu := func(tenant, parent, name string) capacity.CreateQuota {
		return capacity.CreateQuota{TenantID: tenant, Cluster: "c1", Kind: capacity.KindGU, ParentID: parent,
			Spec: capacity.Spec{Name: name, Min: 0, Max: 2, MachineType: "A100"}}
	}
	tests := []struct {
		name string
		cmd  capacity.CreateQuota
		want error
	}{
		{"unknown tenant", gu("nobody", "", "x"), capacity.ErrNotFound},
		// A root without a tenant is malformed, as one without a cluster.
		{"no tenant", gu("", "", "x"), capacity.ErrInvalid},
		{"unknown cluster", capacity.CreateQuota{TenantID: "acme", Cluster: "c9", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Max: 1, MachineType: "A100"}}, capacity.ErrNotFound},
		{"unknown parent", gu("acme", "q-99", "x"), capacity.ErrNotFound},
		// Another tenant's quota does not exist for beta.
		{"another tenant's parent", gu("beta", "q-1", "x"), capacity.ErrNotFound},
		{"a name the tenant uses", gu("acme", "", "gu1"), capacity.ErrExists},
		{"no machine type", capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Max: 1}}, capacity.ErrInvalid},
	}
	for _, tt := range tests {
		mark := len(f.store.Events(0))
		if _, err := f.app.CreateQuota(f.ctx, admin, tt.cmd); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		wantEvents(t, tt.name, eventNames(f.store.Events(mark)))
	}
}

// A quota added below the WorkGroup quota takes the parent's tenant and
// cluster, and changes the WorkGroup's spec (a new generation to apply).
func TestCreateQuotaBelowAWorkGroupQuota(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	mark := len(f.store.Events(0))
	v, err := f.app.CreateQuota(f.ctx, admin, capacity.CreateQuota{ParentID: "q-2", Spec: capacity.Spec{Name: "team-a", Min: 2, Max: 4}})
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "a third-level quota", eventNames(f.store.Events(mark)),
		"quota/q-4 QuotaCreated", "workgroup/q-2 WorkGroupSpecChanged")
	if v.Quota.TenantID != "acme" || v.Quota.Cluster != "c1" || v.Quota.Level != 3 || v.Quota.RootID != "q-1" {
		t.Errorf("new quota = %+v, want acme's level-3 quota on c1 under root q-1", v.Quota)
	}
	if w, _ := f.app.GetWorkGroup(f.ctx, admin, "q-2"); w.Generation != 2 {
		t.Errorf("WorkGroup generation = %d, want 2", w.Generation)
	}
}

func TestUpdateQuota(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.produce()

	// The WorkGroup quota's limits: its WorkGroup is applied again with
	// the new GPUs.
	mark := len(f.store.Events(0))
	v, err := f.app.UpdateQuota(f.ctx, admin, "q-2", new(int64(2)), new(int64(8)))
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "an update of the WorkGroup quota", eventNames(f.store.Events(mark)),
		"quota/q-2 QuotaUpdated", "workgroup/q-2 WorkGroupSpecChanged")
	if v.Quota.Min != 2 || v.WorkGroup == nil || v.WorkGroup.GPUs != 2 || v.WorkGroup.Generation != 2 ||
		v.WorkGroup.Status != capacity.StatusCreating {
		t.Errorf("after the update = %+v / %+v, want min 2 and a Creating WorkGroup of 2 GPUs at generation 2", v.Quota, v.WorkGroup)
	}

	// A GU root's min_units takes inventory, or is refused when short.
	mark = len(f.store.Events(0))
	if _, err := f.app.UpdateQuota(f.ctx, admin, "q-1", new(int64(6)), new(int64(8))); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "an update of the root", eventNames(f.store.Events(mark)), "cluster/c1 InventoryReserved", "quota/q-1 QuotaUpdated")
	mark = len(f.store.Events(0))
	if _, err := f.app.UpdateQuota(f.ctx, admin, "q-1", new(int64(10)), new(int64(10))); !errors.Is(err, capacity.ErrInventoryInsufficient) {
		t.Errorf("a root above the inventory: %v, want ErrInventoryInsufficient", err)
	}
	wantEvents(t, "the refused update", eventNames(f.store.Events(mark)))

	for _, tt := range []struct {
		name string
		c    app.Caller
		id   string
		want error
	}{
		{"a tenant's key", acme, "q-2", app.ErrForbidden},
		{"an unknown quota", admin, "q-99", capacity.ErrNotFound},
	} {
		if _, err := f.app.UpdateQuota(f.ctx, tt.c, tt.id, new(int64(1)), new(int64(2))); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := f.app.UpdateQuota(f.ctx, admin, "q-2", new(int64(3)), new(int64(2))); !errors.Is(err, capacity.ErrInvalid) {
		t.Errorf("min above max: %v, want ErrInvalid", err)
	}
}

// Unsubscription marks the subtree and asks for the WorkGroups' deletion;
// the process manager finishes it.
func TestDeleteQuotaUnsubscribes(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.produce()
	if _, err := f.app.DeleteQuota(f.ctx, acme, "q-1", "done"); !errors.Is(err, app.ErrForbidden) {
		t.Fatalf("a tenant's key unsubscribed: %v", err)
	}
	mark := len(f.store.Events(0))
	v, err := f.app.DeleteQuota(f.ctx, admin, "q-1", "done")
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "unsubscription", eventNames(f.store.Events(mark)),
		"quota/q-1 QuotaUnsubscribed", "quota/q-2 QuotaUnsubscribed", "quota/q-3 QuotaUnsubscribed", "workgroup/q-2 WorkGroupDeleting")
	if v.Quota.Status != capacity.QuotaUnsubscribing || v.Quota.Reason != "done" {
		t.Errorf("answer = %+v, want Unsubscribing with the reason", v.Quota)
	}
	mark = len(f.store.Events(0))
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", "again"); err != nil {
		t.Errorf("unsubscribing again: %v", err)
	}
	wantEvents(t, "unsubscribing again", eventNames(f.store.Events(mark)))
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-99", ""); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("an unknown quota: %v, want ErrNotFound", err)
	}
}

// The answer is the state the unsubscription's own write produced, even
// when the process manager finishes the flow between the commit and the
// answer (here: a pass run from the store's after-commit hook).
func TestDeleteQuotaAnswersWithItsOwnWrite(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.produce()
	committed := f.store.AfterCommit
	f.store.AfterCommit = func(events []capacity.Event) {
		f.store.AfterCommit = committed
		committed(events)
		f.pass()
	}
	v, err := f.app.DeleteQuota(f.ctx, admin, "q-1", "done")
	if err != nil {
		t.Fatal(err)
	}
	if now := f.quota("q-1"); now.Quota.Status != capacity.QuotaDeletedStatus {
		t.Fatalf("q-1 is %s after the pass, want Deleted: the race was not staged", now.Quota.Status)
	}
	if v.Quota.Status != capacity.QuotaUnsubscribing || v.Quota.Reason != "done" {
		t.Errorf("answer = %s %q, want Unsubscribing with the reason", v.Quota.Status, v.Quota.Reason)
	}
	if len(v.Children) != 2 {
		t.Fatalf("answer has %d children, want 2", len(v.Children))
	}
	for _, ch := range v.Children {
		if ch.Quota.Status != capacity.QuotaUnsubscribing {
			t.Errorf("child %s = %s, want Unsubscribing", ch.Quota.ID, ch.Quota.Status)
		}
	}
	if wg := v.Children[0].WorkGroup; wg == nil || wg.Status != capacity.StatusDeleting {
		t.Errorf("q-2's WorkGroup in the answer = %+v, want Deleting", wg)
	}
	if want := f.quota("q-1"); want.Children[0].Quota.ID != v.Children[0].Quota.ID || want.Children[1].Quota.ID != v.Children[1].Quota.ID {
		t.Errorf("answer's children %s, %s; a read's %s, %s", v.Children[0].Quota.ID, v.Children[1].Quota.ID,
			want.Children[0].Quota.ID, want.Children[1].Quota.ID)
	}
}

// Without a Ray cluster no WorkGroup can exist: unsubscription finishes
// at once and gives the root's inventory back.
func TestDeleteQuotaWithoutRayClusterFinishesAtOnce(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	if _, err := f.app.CreateQuota(f.ctx, admin, capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindCU,
		Spec: capacity.Spec{Name: "cu1", Min: 2, Max: 4}}); err != nil {
		t.Fatal(err)
	}
	mark := len(f.store.Events(0))
	v, err := f.app.DeleteQuota(f.ctx, admin, "q-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if v.Quota.Status != capacity.QuotaDeletedStatus {
		t.Errorf("CU quota after unsubscription = %s, want Deleted", v.Quota.Status)
	}
	if got := eventNames(f.store.Events(mark)); len(got) == 0 || got[len(got)-1] != "quota/q-3 QuotaDeleted" {
		t.Errorf("unsubscription recorded %q, want it to end with the quotas deleted", got)
	}
}

func TestQuotaReadsAreTenantScoped(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	v, err := f.app.GetQuota(f.ctx, acme, "q-2")
	if err != nil || v.Quota.ID != "q-2" || v.WorkGroup == nil {
		t.Errorf("acme reads its quota: %+v, %v", v, err)
	}
	if _, err := f.app.GetQuota(f.ctx, beta, "q-1"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("beta read acme's quota: %v, want ErrNotFound", err)
	}
	if _, err := f.app.GetWorkGroup(f.ctx, beta, "q-2"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("beta read acme's WorkGroup: %v, want ErrNotFound", err)
	}
	if _, err := f.app.GetRayCluster(f.ctx, beta, "acme", "c1"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("beta read acme's Ray cluster: %v, want ErrNotFound", err)
	}
	tests := []struct {
		name string
		c    app.Caller
		f    app.QuotaFilter
		want int
	}{
		{"acme lists its own", acme, app.QuotaFilter{}, 3},
		{"beta lists its own", beta, app.QuotaFilter{}, 0},
		{"beta asks for acme's", beta, app.QuotaFilter{TenantID: "acme"}, 0},
		{"an operator lists acme's roots", admin, app.QuotaFilter{TenantID: "acme", RootsOnly: true}, 1},
	}
	for _, tt := range tests {
		vs, err := f.app.ListQuotas(f.ctx, tt.c, tt.f)
		if err != nil || len(vs) != tt.want {
			t.Errorf("%s: %d quotas, %v; want %d", tt.name, len(vs), err, tt.want)
		}
	}
	vs, _ := f.app.ListQuotas(f.ctx, acme, app.QuotaFilter{})
	for _, v := range vs {
		if (v.WorkGroup != nil) != (v.Quota.ID == "q-2") {
			t.Errorf("listed %s with WorkGroup %+v; only q-2 has one", v.Quota.ID, v.WorkGroup)
		}
	}
	// A page token is the last id of a page: anything else is invalid, and
	// so is another tenant's quota id, which a page of the caller's never
	// ends with.
	for _, tt := range []struct {
		name  string
		c     app.Caller
		after string
		want  error
	}{
		{"a page's last id", acme, "q-1", nil},
		{"an operator's", admin, "q-1", nil},
		{"garbage", acme, "garbage", capacity.ErrInvalid},
		{"an operator's garbage", admin, "garbage", capacity.ErrInvalid},
		{"another tenant's quota", beta, "q-1", capacity.ErrInvalid},
	} {
		vs, err := f.app.ListQuotas(f.ctx, tt.c, app.QuotaFilter{After: tt.after})
		var inv *capacity.InvalidError
		if !errors.Is(err, tt.want) || tt.want != nil && (!errors.As(err, &inv) || inv.Field != "page_token" || vs != nil) {
			t.Errorf("page token %s: %d quotas, %v; want %v naming page_token", tt.name, len(vs), err, tt.want)
		}
	}
	ws, err := f.app.ListWorkGroups(f.ctx, beta, "acme", "")
	if err != nil || len(ws) != 0 {
		t.Errorf("beta listed acme's WorkGroups: %+v, %v", ws, err)
	}
	if ws, _ := f.app.ListWorkGroups(f.ctx, acme, "", ""); len(ws) != 1 || ws[0].QuotaID != "q-2" {
		t.Errorf("acme's WorkGroups = %+v, want q-2's", ws)
	}
}
