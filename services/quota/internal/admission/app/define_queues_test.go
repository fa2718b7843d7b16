package app

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
)

func TestPutDefinition(t *testing.T) {
	f := newFixture(t)
	cq := Definition{Kind: KindClusterQueue, Name: "cq", ClusterQueue: gpuQueue("team", "8")}
	if _, err := f.app.Put(f.ctx, premium, cq); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("a tenant defined a queue: %v", err)
	}
	// The topology is checked before anything is recorded.
	cycle := Definition{Kind: KindCohort, Name: "team", Cohort: &quotav1.CohortSpec{Parent: "team"}}
	if _, err := f.app.Put(f.ctx, operator, cycle); !errors.Is(err, ErrInvalid) || !errors.Is(err, errCohortCycle) {
		t.Fatalf("a cohort of its own: %v, want ErrInvalid wrapping the core's error", err)
	}
	wantStrings(t, "refused definitions recorded", f.store.events())
	if f.written != 0 {
		t.Errorf("refused definitions woke the relay %d times", f.written)
	}

	if _, err := f.app.Put(f.ctx, operator, Definition{Kind: KindCohort, Name: "team", Cohort: &quotav1.CohortSpec{}}); err != nil {
		t.Fatal(err)
	}
	got, err := f.app.Put(f.ctx, operator, cq)
	if err != nil || got.Origin != OriginAPI {
		t.Fatalf("Put = %+v, %v; want origin api", got, err)
	}
	cq.ClusterQueue = gpuQueue("team", "16")
	if _, err := f.app.Put(f.ctx, operator, cq); err != nil {
		t.Fatal(err)
	}
	// A LocalQueue is not part of the core's topology.
	if _, err := f.app.Put(f.ctx, operator, localQueue("lq", "cq-none", nil, nil)); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "recorded", f.store.events(),
		"cohort/team v1 CohortDefined", "cluster-queue/cq v1 ClusterQueueDefined", "cluster-queue/cq v2 ClusterQueueDefined",
		"local-queue/lq v1 LocalQueueDefined")
	d, err := f.app.Get(f.ctx, operator, KindClusterQueue, "cq")
	if err != nil || d.ClusterQueue.GetResourceGroups()[0].GetFlavors()[0].GetResources()[0].GetNominalQuota() != "16" {
		t.Errorf("Get = %+v, %v; want the second spec", d, err)
	}
	if f.written != 4 || f.store.state.locks != 4 {
		t.Errorf("%d writes woke the relay %d times and locked the definitions %d times, want 4 each",
			4, f.written, f.store.state.locks)
	}
	if _, err := f.app.Get(f.ctx, operator, KindCohort, "none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of nothing: %v, want ErrNotFound", err)
	}
	if ds, err := f.app.List(f.ctx, operator, KindClusterQueue); err != nil || len(ds) != 1 || ds[0].Name != "cq" {
		t.Errorf("List = %+v, %v", ds, err)
	}
	// Each is recorded as the operator's, with the address of its request
	// (docs/api/audit.md#an-entry).
	wantActors(t, f.store, "ops", "192.0.2.7")
}

// wantActors checks that every recorded definition event names actor and
// ip.
func wantActors(t *testing.T, store *definitions, actor, ip string) {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	for _, e := range store.state.events {
		var env quotav1.QuotaEvent
		if err := proto.Unmarshal(e.Payload, &env); err != nil || env.GetActor() != actor || env.GetActorIp() != ip {
			t.Errorf("%s %s recorded by %q from %q (%v), want %q from %q", e.AggregateID, e.Type, env.GetActor(), env.GetActorIp(), err, actor, ip)
		}
	}
}

func TestDeleteDefinition(t *testing.T) {
	f := newFixture(t)
	for _, d := range []Definition{
		{Kind: KindCohort, Name: "org", Cohort: &quotav1.CohortSpec{}},
		{Kind: KindCohort, Name: "team", Cohort: &quotav1.CohortSpec{Parent: "org"}},
		{Kind: KindClusterQueue, Name: "cq", ClusterQueue: gpuQueue("team", "8")},
	} {
		if _, err := f.app.Put(f.ctx, operator, d); err != nil {
			t.Fatal(err)
		}
	}
	f.store.setAdmitted("cq", 2)
	tests := []struct {
		name string
		c    Caller
		kind DefinitionKind
		def  string
		want error
	}{
		{"by a tenant", premium, KindClusterQueue, "cq", ErrPermissionDenied},
		{"an unknown queue", operator, KindClusterQueue, "none", ErrNotFound},
		{"a queue holding admitted work", operator, KindClusterQueue, "cq", ErrInUse},
		{"a cohort with a queue", operator, KindCohort, "team", ErrInUse},
		{"a cohort with a child cohort", operator, KindCohort, "org", ErrInUse},
		{"a WorkGroup's queue", operator, KindClusterQueue, "gu-acme-gu1", ErrInUse},
	}
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{{TenantID: "acme", Quota: "gu1", MachineType: "A100", GPUs: 4, Status: WorkGroupRunning}}); err != nil {
		t.Fatal(err)
	}
	before := f.store.events()
	for _, tt := range tests {
		if err := f.app.Delete(f.ctx, tt.c, tt.kind, tt.def); !errors.Is(err, tt.want) {
			t.Errorf("delete %s: %v, want %v", tt.name, err, tt.want)
		}
	}
	wantStrings(t, "refused deletions recorded", f.store.events(), before...)

	f.store.setAdmitted("cq", 0)
	for _, d := range []struct {
		kind DefinitionKind
		name string
	}{{KindClusterQueue, "cq"}, {KindCohort, "team"}, {KindCohort, "org"}} {
		if err := f.app.Delete(f.ctx, operator, d.kind, d.name); err != nil {
			t.Fatalf("delete %s %s: %v", d.kind, d.name, err)
		}
	}
	wantStrings(t, "deletions recorded", f.store.events()[len(before):],
		"cluster-queue/cq v2 ClusterQueueDeleted", "cohort/team v2 CohortDeleted", "cohort/org v2 CohortDeleted")
	if ds, _ := f.app.List(f.ctx, operator, KindCohort); len(ds) != 0 {
		t.Errorf("cohorts left: %+v", ds)
	}
}

// The WorkGroups' queues are named gu-…, and only they: an operator
// cannot define one, which would take a GU quota's name or be taken over
// by its sync (docs/api/quota.md#workgroup-queues).
func TestOperatorsCannotDefineWorkGroupQueues(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"gu-acme-gu1", "gu--x-y-w-0123456789ab", "gu-manual"} {
		_, err := f.app.Put(f.ctx, operator, Definition{Kind: KindClusterQueue, Name: name, ClusterQueue: gpuQueue("", "100")})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "belong to the GU quotas' WorkGroups") {
			t.Errorf("put %s: %v, want ErrInvalid naming the WorkGroups", name, err)
		}
	}
	wantStrings(t, "refused definitions recorded", f.store.events())
	// Other kinds may use such names: only ClusterQueues are WorkGroups'.
	if _, err := f.app.Put(f.ctx, operator, Definition{Kind: KindCohort, Name: "gu-cohort", Cohort: &quotav1.CohortSpec{}}); err != nil {
		t.Errorf("a cohort named gu-cohort: %v", err)
	}
}

// Defaults fill in names that do not exist, in one transaction; what an
// operator changed stays.
func TestApplyDefaults(t *testing.T) {
	f := newFixture(t)
	if _, err := f.app.Put(f.ctx, operator, localQueue("lq-low", "cq-mine", nil, nil)); err != nil {
		t.Fatal(err)
	}
	updates := f.store.updates
	defaults := []Definition{
		{Kind: KindCohort, Name: "tenants", Cohort: &quotav1.CohortSpec{}},
		{Kind: KindClusterQueue, Name: "cq-low", ClusterQueue: gpuQueue("tenants", "2")},
		localQueue("lq-low", "cq-low", nil, nil),
	}
	for range 2 {
		if err := f.app.ApplyDefaults(f.ctx, defaults); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.store.updates - updates; n != 2 {
		t.Errorf("two applications took %d transactions, want 2", n)
	}
	wantStrings(t, "recorded", f.store.events(),
		"local-queue/lq-low v1 LocalQueueDefined", "cohort/tenants v1 CohortDefined", "cluster-queue/cq-low v1 ClusterQueueDefined")
	lq, _ := f.app.Get(f.ctx, operator, KindLocalQueue, "lq-low")
	cq, _ := f.app.Get(f.ctx, operator, KindClusterQueue, "cq-low")
	if lq.LocalQueue.GetClusterQueue() != "cq-mine" || lq.Origin != OriginAPI || cq.Origin != OriginConfig {
		t.Errorf("lq-low = %+v (origin %s), cq-low origin %s; want the operator's lq-low kept and cq-low from config",
			lq.LocalQueue, lq.Origin, cq.Origin)
	}

	// A default the core refuses records none of them.
	f2 := newFixture(t)
	err := f2.app.ApplyDefaults(f2.ctx, []Definition{defaults[2], {Kind: KindCohort, Name: "loop", Cohort: &quotav1.CohortSpec{Parent: "loop"}}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("an invalid default: %v, want ErrInvalid", err)
	}
	wantStrings(t, "recorded after a refused default", f2.store.events())
}

// The WorkGroup queues follow the WorkGroups: created, changed, deleted
// when their WorkGroup stops running — or closed while they hold admitted
// work, and deleted once it has ended (docs/api/quota.md#workgroup-queues).
func TestSyncWorkGroups(t *testing.T) {
	f := newFixture(t)
	if _, err := f.app.Put(f.ctx, operator, Definition{Kind: KindClusterQueue, Name: "acme-manual", ClusterQueue: gpuQueue("", "1")}); err != nil {
		t.Fatal(err)
	}
	gu1 := WorkGroup{TenantID: "acme", Quota: "gu1", MachineType: "A100", GPUs: 4, Status: WorkGroupRunning}
	steps := []struct {
		name   string
		groups []WorkGroup
		want   []string
	}{
		{"a new WorkGroup", []WorkGroup{gu1}, []string{"cluster-queue/gu-acme-gu1 v1 ClusterQueueDefined"}},
		{"the same again", []WorkGroup{gu1}, nil},
		{"more GPUs", []WorkGroup{{TenantID: "acme", Quota: "gu1", MachineType: "A100", GPUs: 8, Status: WorkGroupRunning}},
			[]string{"cluster-queue/gu-acme-gu1 v2 ClusterQueueDefined"}},
		{"no WorkGroup any more", nil, []string{"cluster-queue/gu-acme-gu1 v3 ClusterQueueDeleted"}},
		{"a WorkGroup not running yet", []WorkGroup{{TenantID: "acme", Quota: "gu1", MachineType: "A100", GPUs: 4, Status: "Creating"}}, nil},
	}
	for _, s := range steps {
		before := len(f.store.events())
		if err := f.app.SyncWorkGroups(f.ctx, s.groups); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		wantStrings(t, s.name, f.store.events()[before:], s.want...)
	}
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{gu1}); err != nil {
		t.Fatal(err)
	}
	d, _ := f.app.Get(f.ctx, operator, KindClusterQueue, "gu-acme-gu1")
	fq := d.ClusterQueue.GetResourceGroups()[0].GetFlavors()[0]
	if d.Origin != OriginWorkGroup || fq.GetName() != "A100" || fq.GetResources()[0].GetNominalQuota() != "4" ||
		d.ClusterQueue.GetPreemption().GetMinPriorityGap() != 3 || d.Closing != "" {
		t.Errorf("WorkGroup queue = %+v (origin %s, closing %q), want an open flavor A100 with 4 GPUs and a priority gap of 3",
			d.ClusterQueue, d.Origin, d.Closing)
	}

	// A queue holding admitted work whose WorkGroup is being deleted is
	// closed at once: no quota left, the reason recorded with it.
	f.store.setAdmitted("gu-acme-gu1", 1)
	before := len(f.store.events())
	deleting := gu1
	deleting.Status = "Deleting"
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{deleting}); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "a queue holding work", f.store.events()[before:], "cluster-queue/gu-acme-gu1 v5 ClusterQueueDefined")
	closed := func(why string) {
		t.Helper()
		d, err := f.app.Get(f.ctx, operator, KindClusterQueue, "gu-acme-gu1")
		fq := d.ClusterQueue.GetResourceGroups()[0].GetFlavors()[0]
		if err != nil || d.Closing != why || fq.GetName() != "A100" || fq.GetResources()[0].GetNominalQuota() != "0" || d.Origin != OriginWorkGroup {
			t.Fatalf("closed queue = %+v (closing %q), %v; want flavor A100 with nominal 0, closing %q", d.ClusterQueue, d.Closing, err, why)
		}
	}
	closed("its GU quota was deleted")
	// Its WorkGroup gone for good says the same: nothing is recorded.
	if err := f.app.SyncWorkGroups(f.ctx, nil); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "the WorkGroup deleted", f.store.events()[before:], "cluster-queue/gu-acme-gu1 v5 ClusterQueueDefined")
	// Removing drained queues leaves one that still holds work.
	if err := f.app.removeDrained(f.ctx); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "still holding work", f.store.events()[before:], "cluster-queue/gu-acme-gu1 v5 ClusterQueueDefined")
	// Once the work has ended, it goes.
	f.store.setAdmitted("gu-acme-gu1", 0)
	if err := f.app.removeDrained(f.ctx); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "the queue once its work is done", f.store.events()[before:],
		"cluster-queue/gu-acme-gu1 v5 ClusterQueueDefined", "cluster-queue/gu-acme-gu1 v6 ClusterQueueDeleted")
	if _, err := f.app.Get(f.ctx, operator, KindClusterQueue, "acme-manual"); err != nil {
		t.Errorf("an operator's queue was touched by the sync: %v", err)
	}

	// A spec change being applied, or a failure, closes it too, saying so;
	// running again opens it with the WorkGroup's GPUs.
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{gu1}); err != nil {
		t.Fatal(err)
	}
	f.store.setAdmitted("gu-acme-gu1", 1)
	applying := gu1
	applying.Status, applying.GPUs = "Creating", 2
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{applying}); err != nil {
		t.Fatal(err)
	}
	closed("the WorkGroup of GU quota gu1 is Creating, not Running")
	back := gu1
	back.GPUs = 2
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{back}); err != nil {
		t.Fatal(err)
	}
	d, _ = f.app.Get(f.ctx, operator, KindClusterQueue, "gu-acme-gu1")
	if fq := d.ClusterQueue.GetResourceGroups()[0].GetFlavors()[0]; d.Closing != "" || fq.GetResources()[0].GetNominalQuota() != "2" {
		t.Errorf("reopened queue = %+v (closing %q), want nominal 2, open", d.ClusterQueue, d.Closing)
	}
	// Of a deleted quota and a new one of the same name, the new one's
	// state is what the queue follows.
	again := gu1
	again.Status = "Failed"
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{deleting, again}); err != nil {
		t.Fatal(err)
	}
	closed("the WorkGroup of GU quota gu1 is Failed, not Running")
}

// A tenant sees the shared queues and its own WorkGroup queues, never
// another tenant's: such a queue is left out of its lists, a LocalQueue
// admitting into one too, and reading it is an unknown name's answer
// (docs/api/quota.md#workgroup-queues). Operators see every queue.
func TestTenantsSeeNoOtherTenantsWorkGroupQueues(t *testing.T) {
	f := newFixture(t)
	if _, err := f.app.Put(f.ctx, operator, Definition{Kind: KindClusterQueue, Name: "shared", ClusterQueue: gpuQueue("", "8")}); err != nil {
		t.Fatal(err)
	}
	// acme's name spells its tenant out; be-ta's is hashed and does not.
	acmeGU := WorkGroup{TenantID: "acme", Quota: "gu1", MachineType: "A100", GPUs: 4, Status: WorkGroupRunning}
	betaGU := WorkGroup{TenantID: "be-ta", Quota: "gu1", MachineType: "A100", GPUs: 2, Status: WorkGroupRunning}
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{acmeGU, betaGU}); err != nil {
		t.Fatal(err)
	}
	acmeQ, betaQ := WorkGroupQueue("acme", "gu1"), WorkGroupQueue("be-ta", "gu1")
	for _, lq := range []Definition{localQueue("lq-shared", "shared", nil, nil), localQueue("lq-acme", acmeQ, []string{"acme"}, nil),
		localQueue("lq-beta", betaQ, []string{"be-ta"}, nil)} {
		if _, err := f.app.Put(f.ctx, operator, lq); err != nil {
			t.Fatal(err)
		}
	}
	beta := Caller{TenantID: "be-ta", Tier: "standard"}
	names := func(c Caller, kind DefinitionKind) []string {
		t.Helper()
		ds, err := f.app.List(f.ctx, c, kind)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, d := range ds {
			out = append(out, d.Name)
		}
		slices.Sort(out)
		return out
	}
	all := []string{acmeQ, betaQ, "shared"}
	slices.Sort(all)
	wantStrings(t, "the operator's queues", names(operator, KindClusterQueue), all...)
	wantStrings(t, "acme's queues", names(premium, KindClusterQueue), acmeQ, "shared")
	wantStrings(t, "be-ta's queues", names(beta, KindClusterQueue), betaQ, "shared")
	wantStrings(t, "a third tenant's queues", names(standard, KindClusterQueue), "shared")
	wantStrings(t, "the operator's local queues", names(operator, KindLocalQueue), "lq-acme", "lq-beta", "lq-shared")
	wantStrings(t, "acme's local queues", names(premium, KindLocalQueue), "lq-acme", "lq-shared")
	wantStrings(t, "be-ta's local queues", names(beta, KindLocalQueue), "lq-beta", "lq-shared")

	unknown := func(c Caller, name string) string {
		t.Helper()
		_, err := f.app.Get(f.ctx, c, KindClusterQueue, name)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get %s as %+v = %v, want ErrNotFound", name, c, err)
		}
		return strings.ReplaceAll(err.Error(), name, "<name>")
	}
	for _, tc := range []struct {
		c     Caller
		other string
	}{{premium, betaQ}, {beta, acmeQ}, {standard, acmeQ}} {
		if got, want := unknown(tc.c, tc.other), unknown(tc.c, "gu-nobody-nothing"); got != want {
			t.Errorf("%s's read of %s = %q, want an unknown name's %q", tc.c.TenantID, tc.other, got, want)
		}
	}
	for _, tc := range []struct {
		c    Caller
		name string
	}{{premium, acmeQ}, {beta, betaQ}, {operator, acmeQ}, {operator, betaQ}, {standard, "shared"}} {
		if d, err := f.app.Get(f.ctx, tc.c, KindClusterQueue, tc.name); err != nil || d.Name != tc.name {
			t.Errorf("Get %s as %+v = %+v, %v", tc.name, tc.c, d, err)
		}
	}

	// A WorkGroup queue recorded before queues recorded their tenant is
	// nobody's until the sync records it again, with its tenant.
	legacy := WorkGroup{TenantID: "acme", Quota: "gu2", MachineType: "A100", GPUs: 1, Status: WorkGroupRunning}
	legacyQ := WorkGroupQueue("acme", "gu2")
	f.store.put(Definition{Kind: KindClusterQueue, Name: legacyQ, Origin: OriginWorkGroup, ClusterQueue: workGroupSpec(legacy)})
	unknown(premium, legacyQ)
	before := len(f.store.events())
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{acmeGU, betaGU, legacy}); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "the sync", f.store.events()[before:], "cluster-queue/"+legacyQ+" v1 ClusterQueueDefined")
	if d, err := f.app.Get(f.ctx, premium, KindClusterQueue, legacyQ); err != nil || d.TenantID != "acme" {
		t.Errorf("acme's queue once synced = %+v, %v", d, err)
	}
}

// The loop says when admitted work left a closing queue; the app then
// looks for drained queues to remove, once per wake-up.
func TestRemoveDrainedQueuesOnRelease(t *testing.T) {
	f := newFixture(t)
	gu1 := WorkGroup{TenantID: "acme", Quota: "gu1", MachineType: "A100", GPUs: 4, Status: WorkGroupRunning}
	if err := f.app.SyncWorkGroups(f.ctx, []WorkGroup{gu1}); err != nil {
		t.Fatal(err)
	}
	f.store.setAdmitted("gu-acme-gu1", 2)
	if err := f.app.SyncWorkGroups(f.ctx, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.app.RemoveDrainedQueues(ctx) }()
	f.store.setAdmitted("gu-acme-gu1", 0)
	f.app.QueueReleased()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := f.app.Get(f.ctx, operator, KindClusterQueue, "gu-acme-gu1"); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the drained queue was not removed")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	// The quota service keeps these queues itself: no client's address.
	wantActors(t, f.store, "quota", "")
}
