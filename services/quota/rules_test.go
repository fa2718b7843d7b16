package quota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"

	"google.golang.org/protobuf/proto"
)

// wantGUError checks a CheckGUQuota error: its gRPC code and ErrorInfo.
func wantGUError(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "taskmesh" && info.GetReason() == reason {
			if st.Message() == "" {
				t.Fatal("no message")
			}
			return
		}
	}
	t.Fatalf("err = %v has no ErrorInfo %s", err, reason)
}

// CheckGUQuota's three outcomes (docs/api/quota.md, "The submit-time GU check").
func TestCheckGUQuota(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	ctx := context.Background()

	_, err := e.app().CheckGUQuota(ctx, "acme", "gu1")
	wantGUError(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)
	_, err = e.app().CheckGUQuota(ctx, "acme", "")
	wantGUError(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)

	e.start(func(s string) error { // hold the WorkGroup in Creating
		if s == app.StepWorkGroupApply {
			return errors.New("held")
		}
		return nil
	})
	v := e.createGU("acme", "c1", "gu1", "A100", 4, 8)
	_, err = e.app().CheckGUQuota(ctx, "acme", "gu1")
	wantGUError(t, err, codes.FailedPrecondition, app.ReasonGUQuotaCreating)
	// Another tenant does not see acme's quota.
	e.seed("beta", "c1", "A100", 8)
	_, err = e.app().CheckGUQuota(ctx, "beta", "gu1")
	wantGUError(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)

	e.start(nil)
	e.waitStatus(v.Quota.ID, capacity.QuotaActive)
	for _, name := range []string{"gu1", "gu1-default", ""} {
		wg, err := e.app().CheckGUQuota(ctx, "acme", name)
		if err != nil || wg.TenantID != "acme" || wg.Quota != "gu1-default" || wg.MachineType != "A100" || wg.GPUs != 4 {
			t.Fatalf("check %q = %+v, %v", name, wg, err)
		}
	}
	// The background quota has no WorkGroup.
	_, err = e.app().CheckGUQuota(ctx, "acme", "gu1-background")
	wantGUError(t, err, codes.NotFound, app.ReasonGUQuotaNotExists)

	current, err := e.app().CurrentWorkGroups(ctx)
	if err != nil || len(current) != 1 || current[0].GPUs != 4 || current[0].Quota != "gu1-default" ||
		current[0].Status != capacity.StatusRunning {
		t.Fatalf("current = %+v, %v", current, err)
	}
}

// WatchWorkGroups fires when a WorkGroup starts running.
func TestWatchWorkGroups(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := e.app().WatchWorkGroups(ctx)
	e.createGU("acme", "c1", "gu1", "A100", 1, 1)
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("no notification")
	}
}

// Regression tests of known integration pitfalls, and the quota rules.
func TestQuotaRules(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 64)
	ctx := context.Background()

	// Deeply nested GU quotas: every level is created and the operator gets
	// the whole subtree of the second-level quota.
	deep := capacity.Spec{Name: "l5", Min: 1, Max: 2}
	for _, n := range []string{"l4", "l3"} {
		deep = capacity.Spec{Name: n, Min: 1, Max: 2, Children: []capacity.Spec{deep}}
	}
	v := e.createGU("acme", "c1", "deep", "A100", 8, 8,
		capacity.Spec{Name: "l2", Min: 2, Max: 4, Children: []capacity.Spec{deep}},
		capacity.Spec{Name: "deep-bg", Max: 8, Background: true})
	v = e.waitStatus(v.Quota.ID, capacity.QuotaActive)
	l2 := defaultChild(t, v)
	spec, ok := e.op.WorkGroup(capacity.WorkGroupName(l2.Quota.ID))
	if !ok {
		t.Fatal("no WorkGroup applied")
	}
	depth, n := 0, spec.Quota
	for {
		depth++
		if len(n.Children) == 0 {
			break
		}
		n = n.Children[0]
	}
	if depth != 4 || n.Name != "l5" || spec.QuotaName != "l2" || spec.GPUs != 2 {
		t.Fatalf("spec depth %d, leaf %s, quota %s, gpus %d", depth, n.Name, spec.QuotaName, spec.GPUs)
	}
	if c := e.op.Counts(); c.WorkGroupCreated != 1 {
		t.Fatalf("nested quotas made WorkGroups of their own: %+v", c)
	}

	// Adding a quota below the WorkGroup quota applies the WorkGroup again.
	if _, err := e.app().CreateQuota(ctx, admin, capacity.CreateQuota{ParentID: l2.Quota.ID,
		Spec: capacity.Spec{Name: "l3b", Min: 0, Max: 1}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the WorkGroup to be updated", func() bool { return e.op.Counts().WorkGroupUpdated == 1 })
	eventually(t, "the WorkGroup to run again", func() bool {
		w, err := e.app().GetWorkGroup(ctx, admin, l2.Quota.ID)
		return err == nil && w.Status == capacity.StatusRunning && w.Generation == 2
	})
	_ = e.stop() // nothing records events behind the checks below

	bad := []struct {
		name string
		cmd  capacity.CreateQuota
		want error
	}{
		{"min above max", capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Min: 3, Max: 2, MachineType: "A100"}}, capacity.ErrInvalid},
		{"children's min above the parent's", capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Min: 2, Max: 4, MachineType: "A100", Children: []capacity.Spec{{Name: "x1", Min: 2, Max: 2}, {Name: "x2", Min: 1, Max: 2}}}}, capacity.ErrInvalid},
		{"child max above the parent's", capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Min: 2, Max: 4, MachineType: "A100", Children: []capacity.Spec{{Name: "x1", Min: 1, Max: 5}}}}, capacity.ErrInvalid},
		{"background below level 2", capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Min: 2, Max: 4, MachineType: "A100", Children: []capacity.Spec{{Name: "x1", Min: 1, Max: 2,
				Children: []capacity.Spec{{Name: "x2", Max: 1, Background: true}}}}}}, capacity.ErrInvalid},
		{"GU without machine type", capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Min: 1, Max: 1}}, capacity.ErrInvalid},
		{"other machine type below", capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Min: 1, Max: 1, MachineType: "A100", Children: []capacity.Spec{{Name: "x1", Max: 1, MachineType: "H100"}}}}, capacity.ErrInvalid},
		{"duplicate name", capacity.CreateQuota{TenantID: "acme", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "deep", Min: 1, Max: 1, MachineType: "A100"}}, capacity.ErrExists},
		{"unknown tenant", capacity.CreateQuota{TenantID: "nobody", Cluster: "c1", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Min: 1, Max: 1, MachineType: "A100"}}, capacity.ErrNotFound},
		{"unknown cluster", capacity.CreateQuota{TenantID: "acme", Cluster: "c9", Kind: capacity.KindGU,
			Spec: capacity.Spec{Name: "x", Min: 1, Max: 1, MachineType: "A100"}}, capacity.ErrNotFound},
		{"unknown parent", capacity.CreateQuota{ParentID: "q-missing", Spec: capacity.Spec{Name: "x", Min: 0, Max: 1}}, capacity.ErrNotFound},
		{"child min beyond the parent's free min", capacity.CreateQuota{ParentID: l2.Quota.ID,
			Spec: capacity.Spec{Name: "x", Min: 2, Max: 2}}, capacity.ErrInvalid},
	}
	var before int
	_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&before)
	for _, c := range bad {
		if _, err := e.app().CreateQuota(ctx, admin, c.cmd); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	var after int
	_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&after)
	if after != before {
		t.Fatalf("refused productions recorded %d events", after-before)
	}

	// Tenants may not produce; updates while the WorkGroup is being deleted
	// conflict.
	if _, err := e.app().CreateQuota(ctx, app.Caller{TenantID: "acme"}, bad[0].cmd); !errors.Is(err, app.ErrForbidden) {
		t.Fatalf("tenant produced a quota: %v", err)
	}
	if _, err := e.app().UpdateQuota(ctx, admin, v.Quota.ID, new(int64(1)), new(int64(8))); !errors.Is(err, capacity.ErrInvalid) {
		t.Fatalf("root min below its children's: %v", err)
	}
	e.start(func(s string) error { // hold the deletion
		if s == app.StepWorkGroupDelete {
			return errors.New("held")
		}
		return nil
	})
	if _, err := e.app().DeleteQuota(ctx, admin, v.Quota.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.app().UpdateQuota(ctx, admin, l2.Quota.ID, new(int64(1)), new(int64(4))); !errors.Is(err, capacity.ErrConflict) {
		t.Fatalf("update while deleting: %v", err)
	}
}

// A tenant's key sees its own quotas only; another tenant's is not found.
func TestTenantIsolation(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	e.seed("beta", "c1", "A100", 8)
	v := e.createGU("acme", "c1", "gu1", "A100", 1, 1)
	ctx := context.Background()
	beta := app.Caller{TenantID: "beta"}
	if _, err := e.app().GetQuota(ctx, beta, v.Quota.ID); !errors.Is(err, capacity.ErrNotFound) {
		t.Fatalf("beta read acme's quota: %v", err)
	}
	if qs, _ := e.app().ListQuotas(ctx, beta, allQuotas()); len(qs) != 0 {
		t.Fatalf("beta listed %d quotas", len(qs))
	}
	if qs, _ := e.app().ListQuotas(ctx, app.Caller{TenantID: "acme"}, allQuotas()); len(qs) != 3 {
		t.Fatalf("acme listed %d quotas", len(qs))
	}
}

// Events reach Kafka through the outbox relay, and the inline projection
// rebuilt from the events alone equals the live one.
func TestEventsReachKafkaAndProjectionRebuilds(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 8)
	v := e.createGU("acme", "c1", "gu1", "A100", 4, 8)
	e.waitStatus(v.Quota.ID, capacity.QuotaActive)
	if _, err := e.app().UpdateQuota(context.Background(), admin, v.Quota.ID, new(int64(5)), new(int64(8))); err != nil {
		t.Fatal(err)
	}
	if _, err := e.app().DeleteQuota(context.Background(), admin, v.Quota.ID, "bye"); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(v.Quota.ID, capacity.QuotaDeletedStatus)

	var stored int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&stored)
	var recs []kafkatest.KcatRecord
	eventually(t, "every event in Kafka", func() bool {
		recs = e.broker.ConsumeAll(t, quota.Topic)
		return len(recs) >= stored
	})
	var produced bool
	for _, r := range recs {
		var env quotav1.QuotaEvent
		if err := proto.Unmarshal(r.Value, &env); err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != env.GetAggregateId() {
			t.Fatalf("key %s for aggregate %s", r.Key, env.GetAggregateId())
		}
		if p := env.GetQuotaProduced(); p != nil && env.GetAggregateId() == "quota/"+v.Quota.ID {
			produced = len(p.GetWorkGroups()) == 1 && p.GetWorkGroups()[0].GetGpus() == 4
		}
	}
	if !produced {
		t.Fatal("no QuotaProduced message for the root with its WorkGroup")
	}

	rep, err := quota.RebuildInlineProjection(context.Background(), e.pool, false)
	if err != nil || len(rep.Differences) != 0 || rep.Events != stored || rep.Aggregates == 0 {
		t.Fatalf("rebuild = %+v, %v (stored %d)", rep, err, stored)
	}
	// Corrupt a row: the rebuild notices and repairs it.
	if _, err := e.pool.Exec(context.Background(), `UPDATE quotas SET doc = jsonb_set(doc, '{min_units}', '99') WHERE id = $1`, v.Quota.ID); err != nil {
		t.Fatal(err)
	}
	if rep, _ = quota.RebuildInlineProjection(context.Background(), e.pool, true); len(rep.Differences) != 1 {
		t.Fatalf("differences = %v", rep.Differences)
	}
	if rep, _ = quota.RebuildInlineProjection(context.Background(), e.pool, false); len(rep.Differences) != 0 {
		t.Fatalf("after repair: %v", rep.Differences)
	}
}

// Concurrent productions of one name: exactly one wins, the others are
// told the name exists, and the inventory is taken once.
func TestConcurrentProductionsOfOneName(t *testing.T) {
	e := newEnv(t)
	e.seed("acme", "c1", "A100", 64)
	errs := make(chan error, 6)
	for range 6 {
		go func() {
			_, err := e.app().CreateQuota(context.Background(), admin, capacity.CreateQuota{TenantID: "acme", Cluster: "c1",
				Kind: capacity.KindGU, Spec: capacity.Spec{Name: "same", Min: 2, Max: 2, MachineType: "A100"}})
			errs <- err
		}()
	}
	won := 0
	for range 6 {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, capacity.ErrExists):
			t.Errorf("err = %v, want ErrExists", err)
		}
	}
	cl, _ := e.app().GetCluster(context.Background(), admin, "c1")
	if won != 1 || cl.Inventory["A100"].Allocated != 2 {
		t.Fatalf("%d productions won, %d GPUs allocated", won, cl.Inventory["A100"].Allocated)
	}
}
