package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
