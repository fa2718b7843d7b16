package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// The submit-time check: no GU quota is GU_QUOTA_NOT_EXISTS, a WorkGroup
// not Running is GU_QUOTA_CREATING, a Running one is the answer.
func TestCheckGUQuota(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	_, err := f.app.CheckGUQuota(f.ctx, "acme", "gu1")
	wantStatus(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)
	_, err = f.app.CheckGUQuota(f.ctx, "acme", "")
	wantStatus(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)

	f.createGU("gu1", 4, 8)
	for _, name := range []string{"gu1", "gu1-default", "q-2", ""} {
		_, err = f.app.CheckGUQuota(f.ctx, "acme", name)
		wantStatus(t, err, codes.FailedPrecondition, app.ReasonGUQuotaCreating)
	}
	// The root has no WorkGroup of its own: the answer names the quota
	// whose WorkGroup the work waits for.
	_, err = f.app.CheckGUQuota(f.ctx, "acme", "gu1")
	if want := "the WorkGroup of GU quota gu1-default (the one gu1 runs on) is Creating, not Running; retry once it runs"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("naming the root: %v; want it to contain %q", err, want)
	}
	_, err = f.app.CheckGUQuota(f.ctx, "acme", "gu1-default")
	if want := "the WorkGroup of GU quota gu1-default is Creating, not Running"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("naming the WorkGroup quota: %v; want it to contain %q", err, want)
	}
	// Another tenant's quota does not exist for beta.
	_, err = f.app.CheckGUQuota(f.ctx, "beta", "gu1")
	wantStatus(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)

	f.produce()
	// The root, its WorkGroup quota (by name or id) and "any" are served
	// by q-2's WorkGroup.
	for _, name := range []string{"gu1", "gu1-default", "q-2", ""} {
		wg, err := f.app.CheckGUQuota(f.ctx, "acme", name)
		want := app.WorkGroup{TenantID: "acme", Quota: "gu1-default", QuotaID: "q-2", Cluster: "c1", MachineType: "A100", GPUs: 4,
			Status: capacity.StatusRunning}
		if err != nil || wg != want {
			t.Errorf("CheckGUQuota(%q) = %+v, %v; want %+v", name, wg, err, want)
		}
	}
	// The background quota has no WorkGroup and gets none by waiting: work
	// cannot run under it, and the answer does not say to retry.
	_, err = f.app.CheckGUQuota(f.ctx, "acme", "gu1-background")
	wantStatus(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)
	if err == nil || !strings.Contains(err.Error(), "gu1-background of tenant acme has no WorkGroup") || strings.Contains(err.Error(), "retry") {
		t.Errorf("the background quota's answer %v: want it to say it has no WorkGroup, without a retry", err)
	}

	// A root whose WorkGroup quota was deleted has no WorkGroup either.
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-2", ""); err != nil {
		t.Fatal(err)
	}
	_, err = f.app.CheckGUQuota(f.ctx, "acme", "gu1")
	wantStatus(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)
	if err == nil || !strings.Contains(err.Error(), "GU quota gu1 of tenant acme has no WorkGroup") {
		t.Errorf("the root without its WorkGroup quota: %v", err)
	}

	// A quota being unsubscribed is gone for new work.
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", ""); err != nil {
		t.Fatal(err)
	}
	_, err = f.app.CheckGUQuota(f.ctx, "acme", "gu1")
	wantStatus(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)
}

// A failed WorkGroup is still "being created": its reason is in the
// message, so the caller learns why.
func TestCheckGUQuotaOfAFailedWorkGroup(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.op.Reject("wg-q-2", "spec refused")
	f.pass()
	_, err := f.app.CheckGUQuota(f.ctx, "acme", "gu1")
	wantStatus(t, err, codes.FailedPrecondition, app.ReasonGUQuotaCreating)
	if want := "spec refused"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("message %v does not say %q", err, want)
	}
}

// CurrentWorkGroups lists what admission follows, with each WorkGroup's
// status; WatchWorkGroups says when that may have changed, at once (the
// store calls Committed after each commit).
func TestCurrentWorkGroupsAndTheirWatch(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	changed := f.app.WatchWorkGroups(ctx)
	notified := func() bool {
		select {
		case <-changed:
			return true
		default:
			return false
		}
	}
	statuses := func() map[string]string {
		t.Helper()
		ws, err := f.app.CurrentWorkGroups(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, w := range ws {
			out[w.QuotaID] = w.Status
		}
		return out
	}

	f.createGU("gu1", 4, 8)
	f.pass()
	if notified() {
		t.Error("notified before any WorkGroup changed state")
	}
	if got := statuses(); len(got) != 1 || got["q-2"] != capacity.StatusCreating {
		t.Errorf("CurrentWorkGroups before production = %v, want q-2's Creating", got)
	}
	f.op.SetRayPhase(rayName, capacity.PhaseRunning, "")
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseRunning, "")
	f.pass()
	if !notified() {
		t.Error("not notified when the WorkGroup started running")
	}
	ws, err := f.app.CurrentWorkGroups(f.ctx)
	if err != nil || len(ws) != 1 || ws[0].QuotaID != "q-2" || ws[0].GPUs != 4 || ws[0].Status != capacity.StatusRunning {
		t.Errorf("CurrentWorkGroups = %+v, %v; want q-2's, Running", ws, err)
	}
	// The unsubscription's own transaction stops the WorkGroup: its
	// queue must admit nothing more from then on.
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", ""); err != nil {
		t.Fatal(err)
	}
	if !notified() {
		t.Error("not notified when the WorkGroup's deletion was asked for")
	}
	if got := statuses(); got["q-2"] != capacity.StatusDeleting {
		t.Errorf("CurrentWorkGroups after DeleteQuota = %v, want q-2's Deleting", got)
	}
	// Once deleted it is no longer listed.
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseAbsent, "")
	f.pass()
	if got := statuses(); len(got) != 0 {
		t.Errorf("CurrentWorkGroups after the deletion = %v, want none", got)
	}
	// Many changes between two reads coalesce into one wake-up.
	notified()
	f.app.Committed([]capacity.Event{{Data: capacity.WorkGroupRunning{}}})
	f.app.Committed([]capacity.Event{{Data: capacity.WorkGroupFailed{}}})
	if !notified() || notified() {
		t.Error("two changes did not coalesce into one wake-up")
	}
}

// The commands that stop a WorkGroup running have admission follow before
// they answer (FollowWorkGroups); one that changes no WorkGroup does not,
// and a follower's failure does not fail the command.
func TestCommandsThatStopAWorkGroupHaveAdmissionFollow(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.produce()
	var calls int
	var fail error
	f.app.FollowWorkGroups(func(context.Context) error { calls++; return fail })
	if _, err := f.app.UpdateQuota(f.ctx, admin, "q-2", nil, new(int64(6))); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("an update applying the WorkGroup again had admission follow %d times, want 1", calls)
	}
	if _, err := f.app.UpdateQuota(f.ctx, admin, "q-2", nil, new(int64(6))); err != nil || calls != 1 {
		t.Errorf("an update changing nothing: %v, admission followed %d times, want still 1", err, calls)
	}
	fail = errors.New("admission unreachable")
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", ""); err != nil || calls != 2 {
		t.Errorf("DeleteQuota = %v with admission followed %d times, want nil and 2", err, calls)
	}
	f.app.FollowWorkGroups(nil)
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", ""); err != nil || calls != 2 {
		t.Errorf("after the follower was unset: %v, %d calls", err, calls)
	}
}

// A tree's children are answered in the order the request gave them, and
// a root with several WorkGroup children is served by the first one that
// is open, in that order — not by whichever id sorts first
// (docs/api/quota.md#quotas). The ids here sort the other way round.
func TestATreeKeepsTheRequestsOrder(t *testing.T) {
	f := newFixtureWithIDs(t, "q-9", "q-8", "q-7", "q-6", "q-5")
	f.seed(8)
	v, err := f.app.CreateQuota(f.ctx, admin, capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
		Spec: capacity.Spec{Name: "tree", Min: 4, Max: 8, MachineType: "A100", Children: []capacity.Spec{
			{Name: "t-a", Min: 2, Max: 4, Children: []capacity.Spec{{Name: "t-a-x", Min: 1, Max: 2}}},
			{Name: "t-b", Min: 2, Max: 4},
			{Name: "t-bg", Min: 0, Max: 8, Background: true},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	var names func(v app.QuotaView) string
	names = func(v app.QuotaView) string {
		var out []string
		for _, c := range v.Children {
			out = append(out, c.Quota.Name)
			if len(c.Children) > 0 {
				out = append(out, "("+names(c)+")")
			}
		}
		return strings.Join(out, " ")
	}
	const want = "t-a (t-a-x) t-b t-bg"
	if got := names(v); got != want {
		t.Errorf("CreateQuota answers the children %s, want %s", got, want)
	}
	if got := names(f.quota("q-9")); got != want {
		t.Errorf("GetQuota answers the children %s, want %s", got, want)
	}
	f.pass()
	f.op.SetRayPhase(rayName, capacity.PhaseRunning, "")
	f.op.SetWorkGroupPhase("wg-q-8", capacity.PhaseRunning, "")
	f.op.SetWorkGroupPhase("wg-q-6", capacity.PhaseRunning, "")
	f.pass()
	served := func(want string) {
		t.Helper()
		for _, name := range []string{"tree", "q-9"} {
			if wg, err := f.app.CheckGUQuota(f.ctx, "acme", name); err != nil || wg.Quota != want {
				t.Errorf("CheckGUQuota(%s) = %+v, %v; want %s's WorkGroup", name, wg, err, want)
			}
		}
		if w, err := f.app.GetWorkGroup(f.ctx, acme, "q-9"); err != nil || w.QuotaName != want {
			t.Errorf("the root's WorkGroup = %+v, %v; want %s's", w, err, want)
		}
	}
	served("t-a")
	// With t-a gone, the next one in the request's order serves the root.
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-8", ""); err != nil {
		t.Fatal(err)
	}
	served("t-b")
	d, err := f.app.DeleteQuota(f.ctx, admin, "q-9", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(d); got != want {
		t.Errorf("DeleteQuota answers the children %s, want %s", got, want)
	}
}

// A root names its WorkGroup through the unsubscription too: read through
// the root, the WorkGroup goes Deleting, then Deleted, as read through its
// own quota (docs/api/quota.md#quotas).
func TestARootsWorkGroupIsReadToItsEnd(t *testing.T) {
	f := newFixture(t)
	f.seed(8)
	f.createGU("gu1", 4, 8)
	f.produce()
	wantThrough := func(root, child, status string) {
		t.Helper()
		for _, id := range []string{root, child} {
			w, err := f.app.GetWorkGroup(f.ctx, acme, id)
			if err != nil || w.QuotaID != child || w.Status != status {
				t.Errorf("WorkGroup through %s = %+v, %v; want %s's, %s", id, w, err, child, status)
			}
		}
	}
	wantThrough("q-1", "q-2", capacity.StatusRunning)
	f.at = f.at.Add(time.Minute)
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", ""); err != nil {
		t.Fatal(err)
	}
	wantThrough("q-1", "q-2", capacity.StatusDeleting)
	f.at = f.at.Add(time.Minute)
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseAbsent, "")
	f.pass()
	if q := f.quota("q-1"); q.Quota.Status != capacity.QuotaDeletedStatus {
		t.Fatalf("the root is %s, want Deleted", q.Quota.Status)
	}
	wantThrough("q-1", "q-2", capacity.StatusDeleted)
	if _, err := f.app.GetWorkGroup(f.ctx, beta, "q-1"); !errors.Is(err, capacity.ErrNotFound) {
		t.Errorf("beta read acme's deleted root's WorkGroup: %v, want ErrNotFound", err)
	}

	// Of a root's WorkGroup children, one unsubscribed on its own before
	// the root no longer served it: the root names the one that did.
	f = newFixture(t)
	f.seed(8)
	if _, err := f.app.CreateQuota(f.ctx, admin, capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
		Spec: capacity.Spec{Name: "two", Min: 4, Max: 8, MachineType: "A100", Children: []capacity.Spec{
			{Name: "two-a", Min: 2, Max: 4}, {Name: "two-b", Min: 2, Max: 4}}}}); err != nil {
		t.Fatal(err)
	}
	f.pass()
	f.op.SetRayPhase(rayName, capacity.PhaseRunning, "")
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseRunning, "")
	f.op.SetWorkGroupPhase("wg-q-3", capacity.PhaseRunning, "")
	f.pass()
	wantThrough("q-1", "q-2", capacity.StatusRunning)
	f.at = f.at.Add(time.Minute)
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-2", ""); err != nil {
		t.Fatal(err)
	}
	f.op.SetWorkGroupPhase("wg-q-2", capacity.PhaseAbsent, "")
	f.pass()
	wantThrough("q-1", "q-3", capacity.StatusRunning)
	f.at = f.at.Add(time.Minute)
	if _, err := f.app.DeleteQuota(f.ctx, admin, "q-1", ""); err != nil {
		t.Fatal(err)
	}
	wantThrough("q-1", "q-3", capacity.StatusDeleting)
	f.at = f.at.Add(time.Minute)
	f.op.SetWorkGroupPhase("wg-q-3", capacity.PhaseAbsent, "")
	f.pass()
	wantThrough("q-1", "q-3", capacity.StatusDeleted)
}
