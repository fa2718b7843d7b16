package app_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/app/apptest"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

var (
	admin = app.Caller{Admin: true, Actor: app.Actor{ID: "adm_ops", IP: "192.0.2.7"}}
	acme  = app.Caller{TenantID: "acme"}
	beta  = app.Caller{TenantID: "beta"}
	now   = time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
)

// fixture is the use cases and the process manager over the fake store
// and operator, with a fixed clock and ids q-1, q-2, … in order.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	store *apptest.Store
	op    *apptest.Operator
	app   *app.App
	pm    *app.ProcessManager
	// at is what the clock says: now, until a test moves it.
	at time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	n := 0
	f := &fixture{t: t, ctx: context.Background(), store: apptest.NewStore(), op: apptest.NewOperator(), at: now}
	f.app = app.New(f.store, func() time.Time { return f.at }, func() string { n++; return fmt.Sprintf("q-%d", n) }, nil)
	f.store.AfterCommit = f.app.Committed
	f.pm = app.NewProcessManager(f.app, f.store, f.op, time.Hour)
	return f
}

// newFixtureWithIDs is newFixture with quota ids taken from ids in turn:
// ids that do not sort in the order the quotas are created in.
func newFixtureWithIDs(t *testing.T, ids ...string) *fixture {
	t.Helper()
	f := newFixture(t)
	next := 0
	f.app = app.New(f.store, func() time.Time { return f.at }, func() string { next++; return ids[next-1] }, nil)
	f.store.AfterCommit = f.app.Committed
	f.pm = app.NewProcessManager(f.app, f.store, f.op, time.Hour)
	return f
}

// seed registers tenants acme and beta and cluster c1 with gpus A100s.
func (f *fixture) seed(gpus int64) {
	f.t.Helper()
	for _, id := range []string{"acme", "beta"} {
		if _, err := f.app.RegisterTenant(f.ctx, admin, id, "Tenant "+id); err != nil {
			f.t.Fatal(err)
		}
	}
	if _, err := f.app.CreateCluster(f.ctx, admin, "c1", "GPU cluster"); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.app.SetInventory(f.ctx, admin, "c1", "A100", gpus); err != nil {
		f.t.Fatal(err)
	}
}

// createGU produces acme's GU root name on c1 with the standard children:
// the root is q-1 (after earlier ones), its default child (the WorkGroup
// quota) the next id, the background child the one after.
func (f *fixture) createGU(name string, min, max int64) app.QuotaView {
	f.t.Helper()
	v, err := f.app.CreateQuota(f.ctx, admin, capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
		Spec: capacity.Spec{Name: name, Min: min, Max: max, MachineType: "A100"}})
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// pass runs one process manager pass and returns the types of the events
// it recorded, "<aggregate> <type>" in order.
func (f *fixture) pass() []string {
	f.t.Helper()
	mark := len(f.store.Events(0))
	if err := f.pm.Pass(f.ctx); err != nil {
		f.t.Fatalf("pass: %v", err)
	}
	return eventNames(f.store.Events(mark))
}

// produce runs q-1's production to the end: the Ray cluster and the
// WorkGroup of q-2 run.
func (f *fixture) produce() {
	f.t.Helper()
	f.pass()
	f.op.SetRayPhase(capacity.RayName("acme", "c1"), capacity.PhaseRunning, "")
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseRunning, "")
	f.pass()
	if q := f.quota("q-1"); q.Quota.Status != capacity.QuotaActive {
		f.t.Fatalf("q-1 is %s after production, want Active", q.Quota.Status)
	}
}

func (f *fixture) quota(id string) app.QuotaView {
	f.t.Helper()
	v, err := f.app.GetQuota(f.ctx, admin, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// eventNames names events "<aggregate> <type>".
func eventNames(events []capacity.Event) []string {
	out := []string{}
	for _, e := range events {
		out = append(out, e.Aggregate+" "+reflect.TypeOf(e.Data).Name())
	}
	return out
}

func wantEvents(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s recorded\n got %q\nwant %q", what, got, want)
	}
}

// wantStatus checks a gRPC status error with a taskmesh ErrorInfo reason.
func wantStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "taskmesh" && info.GetReason() == reason {
			return
		}
	}
	t.Fatalf("err = %v has no ErrorInfo %s", err, reason)
}
