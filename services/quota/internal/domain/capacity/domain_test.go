package capacity

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)

func fold[S interface{ Apply(Event) S }](s S, events []Event) S {
	for i, e := range events {
		e.Version = int64(i + 1)
		s = s.Apply(e)
	}
	return s
}

func ids() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("q-%d", n) }
}

func cluster(total int64) Cluster {
	return fold(Cluster{}, []Event{{Data: ClusterCreated{Name: "c1"}}, {Data: InventorySet{MachineType: "A100", Total: total}}})
}

func tenant() Tenant { return fold(Tenant{ID: "acme"}, []Event{{Data: TenantCreated{Name: "Acme"}}}) }

func TestTenantAndCluster(t *testing.T) {
	tests := []struct {
		name   string
		events func() ([]Event, error)
		want   error
		n      int
	}{
		{"new tenant", func() ([]Event, error) { return RegisterTenant(Tenant{}, "acme", "Acme", now) }, nil, 1},
		{"same name again", func() ([]Event, error) { return RegisterTenant(tenant(), "acme", "Acme", now) }, nil, 0},
		{"rename", func() ([]Event, error) { return RegisterTenant(tenant(), "acme", "ACME", now) }, nil, 1},
		{"tenant without name", func() ([]Event, error) { return RegisterTenant(Tenant{}, "acme", "", now) }, ErrInvalid, 0},
		{"tenant without id", func() ([]Event, error) { return RegisterTenant(Tenant{}, "", "x", now) }, ErrInvalid, 0},
		{"new cluster", func() ([]Event, error) { return CreateCluster(Cluster{}, "c1", "", now) }, nil, 1},
		{"cluster exists", func() ([]Event, error) { return CreateCluster(cluster(1), "c1", "", now) }, ErrExists, 0},
		{"cluster without name", func() ([]Event, error) { return CreateCluster(Cluster{}, "", "", now) }, ErrInvalid, 0},
		{"inventory", func() ([]Event, error) { return SetInventory(cluster(1), "A100", 4, now) }, nil, 1},
		{"same inventory", func() ([]Event, error) { return SetInventory(cluster(4), "A100", 4, now) }, nil, 0},
		{"inventory of unknown cluster", func() ([]Event, error) { return SetInventory(Cluster{}, "A100", 4, now) }, ErrNotFound, 0},
		{"negative inventory", func() ([]Event, error) { return SetInventory(cluster(1), "A100", -1, now) }, ErrInvalid, 0},
		{"no machine type", func() ([]Event, error) { return SetInventory(cluster(1), "", 1, now) }, ErrInvalid, 0},
		{"below what quotas hold", func() ([]Event, error) {
			c := cluster(8).Apply(Event{Version: 3, Data: InventoryReserved{MachineType: "A100", GPUs: 6}})
			return SetInventory(c, "A100", 5, now)
		}, ErrConflict, 0},
	}
	for _, tt := range tests {
		events, err := tt.events()
		if !errors.Is(err, tt.want) || len(events) != tt.n {
			t.Errorf("%s: %d events, err %v; want %d, %v", tt.name, len(events), err, tt.n, tt.want)
		}
	}
}

func TestTenantFoldTakesItsIDFromTheAggregate(t *testing.T) {
	events, err := RegisterTenant(Tenant{}, "acme", "Acme", now)
	if err != nil {
		t.Fatal(err)
	}
	got := fold(Tenant{}, events)
	if got.ID != "acme" || got.Name != "Acme" || !got.Exists() {
		t.Errorf("folded tenant = %+v, want id acme, name Acme", got)
	}
}

func TestProduceRoot(t *testing.T) {
	events, err := Produce(CreateQuota{TenantID: "acme", Cluster: "c1", Kind: KindGU, Spec: Spec{Name: "gu", Min: 4, Max: 8, MachineType: "A100"}},
		ProductionState{Tenant: tenant(), Cluster: cluster(8), NewID: ids(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, fmt.Sprintf("%s %T", e.Aggregate, e.Data))
	}
	want := []string{"cluster/c1 capacity.InventoryReserved", "quota/q-1 capacity.QuotaCreated", "quota/q-2 capacity.QuotaCreated",
		"quota/q-3 capacity.QuotaCreated", "ray/acme/c1 capacity.RayClusterProvisioning", "workgroup/q-2 capacity.WorkGroupProvisioning"}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("events\n got %v\nwant %v", kinds, want)
	}
	root, def, bg := events[1].Data.(QuotaCreated), events[2].Data.(QuotaCreated), events[3].Data.(QuotaCreated)
	if !root.Provisioning || root.Level != 1 || root.RootID != "q-1" {
		t.Errorf("root = %+v", root)
	}
	// The second level's minimum is the root's, and the WorkGroup
	// names the second-level quota.
	if def.Min != 4 || def.Max != 8 || def.Level != 2 || def.ParentID != "q-1" || !def.Provisioning || def.MachineType != "A100" {
		t.Errorf("default = %+v", def)
	}
	if !bg.Background || bg.Min != 0 || bg.Provisioning {
		t.Errorf("background = %+v", bg)
	}
	wg := events[5].Data.(WorkGroupProvisioning)
	if wg.QuotaID != "q-2" || wg.QuotaName != "gu-default" || wg.GPUs != 4 || wg.RayCluster != "ray-acme-c1" {
		t.Errorf("work group = %+v", wg)
	}

	// With a usable Ray cluster, only the WorkGroup is asked for.
	ray := RayCluster{}.Apply(Event{Version: 1, TenantID: "acme", Data: RayClusterProvisioning{Cluster: "c1", RayName: "ray-acme-c1"}})
	events, err = Produce(CreateQuota{TenantID: "acme", Cluster: "c1", Kind: KindGU, Spec: Spec{Name: "gu2", Min: 1, Max: 1, MachineType: "A100"}},
		ProductionState{Tenant: tenant(), Cluster: cluster(8), Ray: ray, NewID: ids(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if _, ok := e.Data.(RayClusterProvisioning); ok {
			t.Fatal("a second Ray cluster was asked for")
		}
	}
}

func TestProduceRefusals(t *testing.T) {
	gu := func(s Spec) CreateQuota { return CreateQuota{TenantID: "acme", Cluster: "c1", Kind: KindGU, Spec: s} }
	st := ProductionState{Tenant: tenant(), Cluster: cluster(8), NewID: ids(), Now: now}
	tests := []struct {
		name string
		cmd  CreateQuota
		st   ProductionState
		want error
	}{
		{"no tenant", gu(Spec{Name: "x", Min: 1, Max: 1, MachineType: "A100"}), ProductionState{Cluster: cluster(8), NewID: ids()}, ErrNotFound},
		{"no cluster", gu(Spec{Name: "x", Min: 1, Max: 1, MachineType: "A100"}), ProductionState{Tenant: tenant(), NewID: ids()}, ErrNotFound},
		{"short", gu(Spec{Name: "x", Min: 9, Max: 9, MachineType: "A100"}), st, ErrInventoryInsufficient},
		{"no kind", CreateQuota{TenantID: "acme", Cluster: "c1", Spec: Spec{Name: "x", Max: 1}}, st, ErrInvalid},
		{"bad kind", CreateQuota{TenantID: "acme", Cluster: "c1", Kind: "XU", Spec: Spec{Name: "x", Max: 1}}, st, ErrInvalid},
		{"no cluster name", CreateQuota{TenantID: "acme", Kind: KindGU, Spec: Spec{Name: "x", Max: 1}}, st, ErrInvalid},
		{"background root", gu(Spec{Name: "x", Max: 1, MachineType: "A100", Background: true}), st, ErrInvalid},
		{"CU with machine type", CreateQuota{TenantID: "acme", Cluster: "c1", Kind: KindCU, Spec: Spec{Name: "x", Max: 1, MachineType: "A100"}}, st, ErrInvalid},
		{"no name", gu(Spec{Min: 1, Max: 1, MachineType: "A100"}), st, ErrInvalid},
		{"negative min", gu(Spec{Name: "x", Min: -1, Max: 1, MachineType: "A100"}), st, ErrInvalid},
		{"zero max", gu(Spec{Name: "x", Max: 0, MachineType: "A100"}), st, ErrInvalid},
		{"two backgrounds", gu(Spec{Name: "x", Min: 1, Max: 1, MachineType: "A100", Children: []Spec{
			{Name: "b1", Max: 1, Background: true}, {Name: "b2", Max: 1, Background: true}}}), st, ErrInvalid},
		{"background with children", gu(Spec{Name: "x", Min: 1, Max: 1, MachineType: "A100", Children: []Spec{
			{Name: "b1", Max: 1, Background: true, Children: []Spec{{Name: "b2", Max: 1}}}}}), st, ErrInvalid},
		{"same name twice in the tree", gu(Spec{Name: "x", Min: 1, Max: 1, MachineType: "A100", Children: []Spec{{Name: "x", Max: 1}}}), st, ErrExists},
	}
	for _, tt := range tests {
		if _, err := Produce(tt.cmd, tt.st); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	// A root that names no tenant is malformed, naming the field, like one
	// that names no cluster; it is not an unknown tenant "".
	var inv *InvalidError
	_, err := Produce(CreateQuota{Cluster: "c1", Kind: KindGU, Spec: Spec{Name: "x", Max: 1, MachineType: "A100"}},
		ProductionState{Cluster: cluster(8), NewID: ids(), Now: now})
	if !errors.As(err, &inv) || inv.Field != "tenant_id" {
		t.Errorf("a root without tenant_id: %v, want it invalid, naming tenant_id", err)
	}
}

func TestUpdateAndUnsubscribe(t *testing.T) {
	root := Quota{}.Apply(Event{Version: 1, TenantID: "acme", Data: QuotaCreated{ID: "r", Name: "r", Kind: KindGU, Cluster: "c1", Level: 1,
		RootID: "r", MachineType: "A100", Min: 4, Max: 8}})
	child := Quota{}.Apply(Event{Version: 1, TenantID: "acme", Data: QuotaCreated{ID: "d", Name: "d", Kind: KindGU, Cluster: "c1", Level: 2,
		ParentID: "r", RootID: "r", MachineType: "A100", Min: 4, Max: 8, Provisioning: true}})
	wg := WorkGroup{}.Apply(Event{Version: 1, TenantID: "acme", Data: WorkGroupProvisioning{WorkGroupID: "wg-d", QuotaID: "d", GPUs: 4}})
	c := cluster(8).Apply(Event{Version: 3, Data: InventoryReserved{MachineType: "A100", GPUs: 4}})

	tests := []struct {
		name     string
		st       UpdateState
		min, max int64
		want     error
		n        int
	}{
		{"child while Creating", UpdateState{Quota: child, Parent: root, Siblings: []Quota{child}, Anchor: child, AnchorWorkGroup: wg}, 2, 8, nil, 2},
		{"child above parent max", UpdateState{Quota: child, Parent: root, Anchor: child, AnchorWorkGroup: wg}, 2, 9, ErrInvalid, 0},
		{"child min above parent min", UpdateState{Quota: child, Parent: root, Anchor: child, AnchorWorkGroup: wg}, 5, 8, ErrInvalid, 0},
		{"child while deleting", UpdateState{Quota: child, Parent: root, Anchor: child,
			AnchorWorkGroup: wg.Apply(Event{Version: 2, Data: WorkGroupDeleting{}})}, 2, 8, ErrConflict, 0},
		{"root grows", UpdateState{Quota: root, Children: []Quota{child}, Cluster: c}, 6, 8, nil, 2},
		{"root takes the rest of the inventory", UpdateState{Quota: root, Children: []Quota{child}, Cluster: c}, 8, 8, nil, 2},
		{"root shrinks below children", UpdateState{Quota: root, Children: []Quota{child}, Cluster: c}, 3, 8, ErrInvalid, 0},
		{"min above max", UpdateState{Quota: root, Cluster: c}, 5, 4, ErrInvalid, 0},
		{"unchanged", UpdateState{Quota: root, Children: []Quota{child}, Cluster: c}, 4, 8, nil, 0},
		{"unknown", UpdateState{}, 1, 1, ErrNotFound, 0},
		{"deleted", UpdateState{Quota: root.Apply(Event{Version: 2, Data: QuotaDeleted{}})}, 4, 8, ErrConflict, 0},
	}
	for _, tt := range tests {
		events, err := UpdateQuota(tt.st, tt.min, tt.max)
		if !errors.Is(err, tt.want) || len(events) != tt.n {
			t.Errorf("%s: %d events, err %v; want %d, %v", tt.name, len(events), err, tt.n, tt.want)
		}
	}
	// The field named is the one whose new value broke the rule.
	for _, tt := range []struct {
		min, max int64
		field    string
	}{{4, 3, "max_units"}, {9, 8, "min_units"}} {
		_, err := UpdateQuota(UpdateState{Quota: root, Cluster: c}, tt.min, tt.max)
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Field != tt.field {
			t.Errorf("min %d, max %d on min 4, max 8: %v, want it to name %s", tt.min, tt.max, err, tt.field)
		}
	}
	big := cluster(8).Apply(Event{Version: 3, Data: InventoryReserved{MachineType: "A100", GPUs: 7}})
	if _, err := UpdateQuota(UpdateState{Quota: root, Cluster: big}, 6, 8); !errors.Is(err, ErrInventoryInsufficient) {
		t.Errorf("root beyond free inventory: %v", err)
	}

	ray := RayCluster{}.Apply(Event{Version: 1, TenantID: "acme", Data: RayClusterProvisioning{Cluster: "c1"}})
	events, err := Unsubscribe(UnsubscribeState{Quota: root, Subtree: []Quota{child}, WorkGroups: map[string]WorkGroup{"d": wg}, Ray: ray})
	if err != nil || len(events) != 3 {
		t.Fatalf("unsubscribe with a WorkGroup: %v, %v", events, err)
	}
	// No Ray cluster: done at once, the inventory given back.
	events, err = Unsubscribe(UnsubscribeState{Quota: root, Subtree: []Quota{child}, WorkGroups: map[string]WorkGroup{}})
	if err != nil || len(events) != 5 {
		t.Fatalf("unsubscribe without a Ray cluster: %v, %v", events, err)
	}
	if _, ok := events[4].Data.(InventoryReleased); !ok {
		t.Fatalf("last event = %T", events[4].Data)
	}
	gone := root.Apply(Event{Version: 2, Data: QuotaDeleted{}})
	if events, err := Unsubscribe(UnsubscribeState{Quota: gone}); err != nil || len(events) != 0 {
		t.Fatalf("unsubscribe a deleted quota: %v, %v", events, err)
	}
	if _, err := Unsubscribe(UnsubscribeState{Quota: Quota{}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unsubscribe a quota never created: %v", err)
	}
	leaving := root.Apply(Event{Version: 2, Data: QuotaUnsubscribed{}})
	if events, err := Unsubscribe(UnsubscribeState{Quota: leaving}); err != nil || len(events) != 0 {
		t.Fatalf("unsubscribe twice: %v, %v", events, err)
	}
	if got := FinishUnsubscription(UnsubscribeState{Quota: leaving, WorkGroups: map[string]WorkGroup{"d": wg}}); got != nil {
		t.Fatalf("finished with a WorkGroup left: %v", got)
	}
}

func TestObserveAndSettle(t *testing.T) {
	wg := fold(WorkGroup{}, []Event{{TenantID: "acme", Data: WorkGroupProvisioning{WorkGroupID: "wg-d", QuotaID: "d", GPUs: 4}},
		{Data: WorkGroupApplied{Generation: 1}}})
	tests := []struct {
		name string
		w    WorkGroup
		o    Observation
		want string
	}{
		{"running", wg, Observation{Phase: PhaseRunning, Generation: 1}, "capacity.WorkGroupRunning"},
		{"running at an older generation", wg.Apply(Event{Version: 3, Data: WorkGroupSpecChanged{Generation: 2, GPUs: 2}}).
			Apply(Event{Version: 4, Data: WorkGroupApplied{Generation: 2}}), Observation{Phase: PhaseRunning, Generation: 1}, ""},
		{"failed", wg, Observation{Phase: PhaseFailed, Generation: 1, Reason: "boom"}, "capacity.WorkGroupFailed"},
		{"pending", wg, Observation{Phase: PhasePending, Generation: 1}, ""},
		{"not applied yet", fold(WorkGroup{}, []Event{{Data: WorkGroupProvisioning{QuotaID: "d"}}}), Observation{Phase: PhaseRunning, Generation: 1}, ""},
		{"deleted", wg.Apply(Event{Version: 3, Data: WorkGroupDeleting{}}), Observation{Phase: PhaseAbsent}, "capacity.WorkGroupDeleted"},
		{"still deleting", wg.Apply(Event{Version: 3, Data: WorkGroupDeleting{}}), Observation{Phase: PhaseRunning}, ""},
	}
	for _, tt := range tests {
		got := ""
		if events := ObserveWorkGroup(tt.w, tt.o, now); len(events) == 1 {
			got = fmt.Sprintf("%T", events[0].Data)
		}
		if got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}

	q := Quota{}.Apply(Event{Version: 1, Data: QuotaCreated{ID: "d", Kind: KindGU, Level: 2, Provisioning: true}})
	running := wg.Apply(Event{Version: 3, Data: WorkGroupRunning{GPUs: 4}})
	failed := wg.Apply(Event{Version: 3, Data: WorkGroupFailed{Reason: "boom"}})
	if e := SettleProduction(q, []WorkGroup{running}, now); len(e) != 1 || len(e[0].Data.(QuotaProduced).WorkGroups) != 1 {
		t.Errorf("settle running = %v", e)
	}
	e := SettleProduction(q, []WorkGroup{failed}, now)
	if len(e) != 1 {
		t.Fatalf("settle failed = %v", e)
	}
	q = q.Apply(Event{Version: 2, Data: e[0].Data})
	if q.Status != QuotaFailed || SettleProduction(q, []WorkGroup{failed}, now) != nil {
		t.Errorf("a failed quota is failed again: %+v", q)
	}
	if SettleProduction(q, []WorkGroup{wg}, now) != nil {
		t.Error("settled while a WorkGroup is still being created")
	}
	ray := fold(RayCluster{}, []Event{{TenantID: "acme", Data: RayClusterProvisioning{Cluster: "c1"}}})
	if ObserveRay(ray, Observation{Phase: PhaseRunning}, now) != nil {
		t.Error("a Ray cluster not yet applied was observed")
	}
	ray = ray.Apply(Event{Version: 2, Data: RayClusterApplied{}})
	if e := ObserveRay(ray, Observation{Phase: PhaseFailed}, now); len(e) != 1 || e[0].Data.(RayClusterFailed).Reason == "" {
		t.Errorf("ray failed = %v", e)
	}
}

func TestRayName(t *testing.T) {
	if got := RayName("acme", "c1"); got != "ray-acme-c1" {
		t.Errorf("RayName = %s, want the plain form", got)
	}
	long := RayName("t"+fmt.Sprintf("%062d", 0), "cluster-with-a-long-name")
	if len(long) > 63 || long == RayName("t"+fmt.Sprintf("%062d", 1), "cluster-with-a-long-name") {
		t.Errorf("long names: %s", long)
	}
}

// No two ⟨tenant, name⟩ pairs share a name, however their parts run
// together, and every name is a DNS label: a Kubernetes resource's name
// and a queue definition's.
func TestScopedName(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	pairs := [][2]string{
		{"acme", "c1"}, {"x", "y-w"}, {"x-y", "w"}, {"x", "y-local"}, {"x-y", "local"},
		{"a_b", "c"}, {"a-b", "c"}, {"ab", "c"}, {"a", "b-c"}, {"a", "b_c"}, {"a", "B-c"},
		{"demo", "My_Q-default"}, {"demo", "my-q-default"}, {"t1", "gq1-default"},
		{"t" + strings.Repeat("0", 62), "c"}, {"t" + strings.Repeat("0", 61) + "1", "c"},
		{"t", strings.Repeat("q", 80)}, {"t", strings.Repeat("q", 81)}, {"-", "-"}, {"_", "_"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		for _, prefix := range []string{"gu", "ray"} {
			n := ScopedName(prefix, p[0], p[1])
			if !label.MatchString(n) || !strings.HasPrefix(n, prefix+"-") {
				t.Errorf("ScopedName(%s, %q, %q) = %q: not a DNS label starting %s-", prefix, p[0], p[1], n, prefix)
			}
			if q, ok := seen[n]; ok {
				t.Errorf("%q and %q both named %q", q, p, n)
			}
			seen[n] = p
		}
	}
	for _, c := range []struct{ tenant, name, want string }{
		{"demo", "gq1-default", "gu-demo-gq1-default"}, // the plain form stays as it was
		{"x-y", "w", "gu--x-y-w-"},                     // a tenant holding '-': hashed
		{"demo", "My_Q-default", "gu--demo-my-q-default-"},
	} {
		if got := ScopedName("gu", c.tenant, c.name); !strings.HasPrefix(got, c.want) {
			t.Errorf("ScopedName(gu, %q, %q) = %q, want it to start %q", c.tenant, c.name, got, c.want)
		}
	}
}

func TestZeroStateAndFoldByAggregateType(t *testing.T) {
	tests := []struct {
		aggregate string
		data      any
		want      any
	}{
		{TenantAggregate("acme"), TenantCreated{Name: "Acme"}, Tenant{}},
		{ClusterAggregate("c1"), ClusterCreated{Name: "c1"}, Cluster{}},
		{QuotaAggregate("q-1"), QuotaUpdated{Min: 1, Max: 2}, Quota{}},
		{RayAggregate("acme", "c1"), RayClusterApplied{}, RayCluster{}},
		{WorkGroupAggregate("q-1"), WorkGroupApplied{Generation: 1}, WorkGroup{}},
	}
	for _, tt := range tests {
		s, err := ZeroState(tt.aggregate)
		if err != nil || fmt.Sprintf("%T", s) != fmt.Sprintf("%T", tt.want) || StateVersion(s) != 0 {
			t.Errorf("ZeroState(%s) = %T v%d, %v; want a %T at version 0", tt.aggregate, s, StateVersion(s), err, tt.want)
			continue
		}
		for v := int64(1); v <= 2; v++ {
			s = Fold(s, Event{Aggregate: tt.aggregate, Version: v, At: now, Data: tt.data})
		}
		if fmt.Sprintf("%T", s) != fmt.Sprintf("%T", tt.want) || StateVersion(s) != 2 {
			t.Errorf("%s folded twice = %T v%d, want a %T at version 2", tt.aggregate, s, StateVersion(s), tt.want)
		}
	}
	if _, err := ZeroState("job/1"); err == nil {
		t.Error("ZeroState of an unknown aggregate type succeeded")
	}
	if got := Fold("not a state", Event{Version: 1}); got != "not a state" || StateVersion(got) != 0 {
		t.Errorf("Fold of a non-state = %v", got)
	}
}
