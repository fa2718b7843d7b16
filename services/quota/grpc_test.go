package quota_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

const internalToken = "test-internal-token"

// client serves the env's current instance over gRPC.
func (e *env) client() quotav1.QuotaServiceClient {
	e.t.Helper()
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: internalToken})
	if err != nil {
		e.t.Fatal(err)
	}
	e.svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close(); srv.Stop() })
	return quotav1.NewQuotaServiceClient(conn)
}

func as(p authn.Principal) context.Context {
	return authn.Outgoing(context.Background(), p, internalToken)
}
func operator() context.Context { return as(authn.Principal{Kind: authn.KindAdmin, Subject: "ops"}) }
func tenantKey(t string) context.Context {
	return as(authn.Principal{Kind: authn.KindUser, TenantID: t, Subject: "key-" + t})
}

// businessCode returns a status's gRPC code and ErrorInfo code metadata
// (CheckGUQuota's errors carry a reason only).
func businessCode(err error) (codes.Code, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetMetadata()["code"]
		}
	}
	return st.Code(), ""
}

func TestQuotaServiceOverGRPC(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ops := operator()
	if _, err := c.RegisterTenant(ops, &quotav1.RegisterTenantRequest{TenantId: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterTenant(ops, &quotav1.RegisterTenantRequest{TenantId: "beta", Name: "Beta"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateCluster(ops, &quotav1.CreateClusterRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetInventory(ops, &quotav1.SetInventoryRequest{Cluster: "c1", MachineType: "A100", TotalGpus: 8}); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name     string
		ctx      context.Context
		call     func(context.Context) error
		code     codes.Code
		business string
	}{
		{"tenant may not produce", tenantKey("acme"), func(ctx context.Context) error {
			_, err := c.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: "c1", Kind: "GU",
				Spec: &quotav1.QuotaSpec{Name: "x", MinUnits: 1, MaxUnits: 1, MachineType: "A100"}})
			return err
		}, codes.PermissionDenied, ""},
		{"min above max is invalid", ops, func(ctx context.Context) error {
			_, err := c.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: "c1", Kind: "GU",
				Spec: &quotav1.QuotaSpec{Name: "x", MinUnits: 3, MaxUnits: 1, MachineType: "A100"}})
			return err
		}, codes.InvalidArgument, "30005"},
		{"a root without its tenant is invalid", ops, func(ctx context.Context) error {
			_, err := c.CreateQuota(ctx, &quotav1.CreateQuotaRequest{Cluster: "c1", Kind: "GU",
				Spec: &quotav1.QuotaSpec{Name: "x", MinUnits: 1, MaxUnits: 1, MachineType: "A100"}})
			return err
		}, codes.InvalidArgument, "30005"},
		{"inventory short", ops, func(ctx context.Context) error {
			_, err := c.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: "c1", Kind: "GU",
				Spec: &quotav1.QuotaSpec{Name: "x", MinUnits: 9, MaxUnits: 9, MachineType: "A100"}})
			return err
		}, codes.FailedPrecondition, "31003"},
		{"unknown quota", ops, func(ctx context.Context) error {
			_, err := c.GetQuota(ctx, &quotav1.GetQuotaRequest{QuotaId: "q-none"})
			return err
		}, codes.NotFound, "31004"},
		{"agents may not", as(authn.Principal{Kind: authn.KindAgent, AgentID: "a1", Subject: "a1"}), func(ctx context.Context) error {
			_, err := c.ListQuotas(ctx, &quotav1.ListQuotasRequest{})
			return err
		}, codes.PermissionDenied, ""},
		{"a page token this API did not give", ops, func(ctx context.Context) error {
			_, err := c.ListQuotas(ctx, &quotav1.ListQuotasRequest{PageToken: "garbage"})
			return err
		}, codes.InvalidArgument, "30005"},
		{"check: no such GU quota", ops, func(ctx context.Context) error {
			_, err := c.CheckGUQuota(ctx, &quotav1.CheckGUQuotaRequest{TenantId: "acme", Quota: "gu1"})
			return err
		}, codes.NotFound, ""},
	}
	for _, tc := range cases {
		code, business := businessCode(tc.call(tc.ctx))
		if code != tc.code || business != tc.business {
			t.Errorf("%s: %s %q, want %s %q", tc.name, code, business, tc.code, tc.business)
		}
	}
	if qs, _ := c.ListQuotas(ops, &quotav1.ListQuotasRequest{}); len(qs.GetQuotas()) != 0 {
		t.Fatalf("refused requests stored quotas: %v", qs)
	}

	created, err := c.CreateQuota(ops, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: "c1", Kind: "GU",
		Spec: &quotav1.QuotaSpec{Name: "gu1", MinUnits: 2, MaxUnits: 4, MachineType: "A100"}})
	if err != nil {
		t.Fatal(err)
	}
	q := created.GetQuota()
	// Provisioning, or Active when the in-process operator was quicker
	// than the answer's read (docs/api/quota.md, CreateQuota).
	if (q.GetStatus() != capacity.QuotaProvisioning && q.GetStatus() != capacity.QuotaActive) || len(q.GetChildren()) != 2 {
		t.Fatalf("created %v", q)
	}
	e.waitStatus(q.GetId(), capacity.QuotaActive)
	_, err = c.SetInventory(ops, &quotav1.SetInventoryRequest{Cluster: "c1", MachineType: "A100", TotalGpus: 1})
	if code, business := businessCode(err); code != codes.FailedPrecondition || business != "31006" {
		t.Fatalf("inventory below what quotas hold: %s %s", code, business)
	}
	_, err = c.CreateCluster(ops, &quotav1.CreateClusterRequest{Name: "c1"})
	if code, business := businessCode(err); code != codes.AlreadyExists || business != "31005" {
		t.Fatalf("cluster created twice: %s %s", code, business)
	}

	// The tenant reads its own quota; another tenant's is not found.
	got, err := c.GetQuota(tenantKey("acme"), &quotav1.GetQuotaRequest{QuotaId: q.GetId()})
	if err != nil || got.GetQuota().GetStatus() != capacity.QuotaActive {
		t.Fatalf("get = %v, %v", got, err)
	}
	if _, err := c.GetQuota(tenantKey("beta"), &quotav1.GetQuotaRequest{QuotaId: q.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("beta got acme's quota: %v", err)
	}
	check, err := c.CheckGUQuota(tenantKey("acme"), &quotav1.CheckGUQuotaRequest{TenantId: "acme", Quota: "gu1"})
	if err != nil || check.GetWorkGroup().GetStatus() != capacity.StatusRunning || check.GetQuotaName() != "gu1-default" {
		t.Fatalf("check = %v, %v", check, err)
	}
	if _, err := c.CheckGUQuota(tenantKey("beta"), &quotav1.CheckGUQuotaRequest{TenantId: "acme", Quota: "gu1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("beta checked acme's quota: %v", err)
	}
	wgs, err := c.ListWorkGroups(tenantKey("acme"), &quotav1.ListWorkGroupsRequest{Status: "Running"})
	if err != nil || len(wgs.GetWorkGroups()) != 1 || wgs.GetWorkGroups()[0].GetGpus() != 2 {
		t.Fatalf("work groups = %v, %v", wgs, err)
	}
	page, err := c.ListQuotas(ops, &quotav1.ListQuotasRequest{PageSize: 2})
	if err != nil || len(page.GetQuotas()) != 2 || page.GetNextPageToken() == "" {
		t.Fatalf("page = %v, %v", page, err)
	}
	rest, err := c.ListQuotas(ops, &quotav1.ListQuotasRequest{PageSize: 2, PageToken: page.GetNextPageToken()})
	if err != nil || len(rest.GetQuotas()) != 1 || rest.GetNextPageToken() != "" {
		t.Fatalf("rest = %v, %v", rest, err)
	}
	del, err := c.DeleteQuota(ops, &quotav1.DeleteQuotaRequest{QuotaId: q.GetId()})
	if err != nil || del.GetQuota().GetStatus() != capacity.QuotaUnsubscribing {
		t.Fatalf("delete = %v, %v", del, err)
	}
	e.waitStatus(q.GetId(), capacity.QuotaDeletedStatus)
	// Read through the root, its WorkGroup is there to the end.
	wg, err := c.GetWorkGroup(tenantKey("acme"), &quotav1.GetWorkGroupRequest{QuotaId: q.GetId()})
	if err != nil || wg.GetWorkGroup().GetStatus() != capacity.StatusDeleted || wg.GetWorkGroup().GetQuotaName() != "gu1-default" {
		t.Fatalf("the deleted root's WorkGroup = %v, %v; want gu1-default's, Deleted", wg, err)
	}
}

// UpdateQuota changes the limits the request has (a PATCH of min_units
// alone keeps max_units); with neither it answers the quota as it is.
func TestUpdateQuotaChangesTheLimitsGiven(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ops := operator()
	if _, err := c.RegisterTenant(ops, &quotav1.RegisterTenantRequest{TenantId: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateCluster(ops, &quotav1.CreateClusterRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetInventory(ops, &quotav1.SetInventoryRequest{Cluster: "c1", MachineType: "A100", TotalGpus: 8}); err != nil {
		t.Fatal(err)
	}
	created, err := c.CreateQuota(ops, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: "c1", Kind: "GU",
		Spec: &quotav1.QuotaSpec{Name: "gu1", MinUnits: 2, MaxUnits: 4, MachineType: "A100"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetQuota().GetId()
	e.waitStatus(id, capacity.QuotaActive)
	limits := func(r *quotav1.UpdateQuotaResponse, err error) string {
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%d-%d", r.GetQuota().GetMinUnits(), r.GetQuota().GetMaxUnits())
	}
	if got := limits(c.UpdateQuota(ops, &quotav1.UpdateQuotaRequest{QuotaId: id, MaxUnits: new(int32(6))})); got != "2-6" {
		t.Fatalf("max_units alone: %s, want 2-6", got)
	}
	if got := limits(c.UpdateQuota(ops, &quotav1.UpdateQuotaRequest{QuotaId: id, MinUnits: new(int32(3))})); got != "3-6" {
		t.Fatalf("min_units alone: %s, want 3-6", got)
	}
	before, err := c.GetQuota(ops, &quotav1.GetQuotaRequest{QuotaId: id})
	if err != nil {
		t.Fatal(err)
	}
	same, err := c.UpdateQuota(ops, &quotav1.UpdateQuotaRequest{QuotaId: id})
	if err != nil || limits(same, nil) != "3-6" || !same.GetQuota().GetUpdatedAt().AsTime().Equal(before.GetQuota().GetUpdatedAt().AsTime()) {
		t.Fatalf("neither: %v, %v; want the quota as it was", same, err)
	}
	// min_units 0 is a value, not an absence (on the background quota,
	// whose min the root's need not cover).
	var bg string
	for _, ch := range created.GetQuota().GetChildren() {
		if ch.GetBackground() {
			bg = ch.GetId()
		}
	}
	if got := limits(c.UpdateQuota(ops, &quotav1.UpdateQuotaRequest{QuotaId: bg, MinUnits: new(int32(1))})); got != "1-4" {
		t.Fatalf("background min_units 1: %s, want 1-4", got)
	}
	if got := limits(c.UpdateQuota(ops, &quotav1.UpdateQuotaRequest{QuotaId: bg, MinUnits: new(int32(0))})); got != "0-4" {
		t.Fatalf("background min_units 0: %s, want 0-4", got)
	}
	for _, tc := range []struct {
		name string
		req  *quotav1.UpdateQuotaRequest
	}{
		{"min above the kept max", &quotav1.UpdateQuotaRequest{QuotaId: id, MinUnits: new(int32(7))}},
		{"min above max", &quotav1.UpdateQuotaRequest{QuotaId: id, MinUnits: new(int32(5)), MaxUnits: new(int32(4))}},
		{"max 0", &quotav1.UpdateQuotaRequest{QuotaId: id, MaxUnits: new(int32(0))}},
	} {
		_, err := c.UpdateQuota(ops, tc.req)
		if code, business := businessCode(err); code != codes.InvalidArgument || business != "30005" {
			t.Errorf("%s: %s %q, want InvalidArgument 30005", tc.name, code, business)
		}
	}
	if got := limits(c.UpdateQuota(ops, &quotav1.UpdateQuotaRequest{QuotaId: id})); got != "3-6" {
		t.Fatalf("after the refused updates: %s, want 3-6", got)
	}
}

// An operator's change is recorded as the operator key's, with the address
// of its request as the gateway saw it; what the process manager does, as
// the service's own, with none (docs/api/audit.md#quota-and-queue-changes).
func TestChangesRecordWhoMadeThemAndFromWhere(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	op := as(authn.Principal{Kind: authn.KindAdmin, Subject: "adm_7zaw", RemoteIP: "192.0.2.7"})
	if _, err := c.RegisterTenant(op, &quotav1.RegisterTenantRequest{TenantId: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateCluster(op, &quotav1.CreateClusterRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetInventory(op, &quotav1.SetInventoryRequest{Cluster: "c1", MachineType: "A100", TotalGpus: 8}); err != nil {
		t.Fatal(err)
	}
	q, err := c.CreateQuota(op, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: "c1", Kind: "GU",
		Spec: &quotav1.QuotaSpec{Name: "gu1", MinUnits: 2, MaxUnits: 4, MachineType: "A100"}})
	if err != nil {
		t.Fatal(err)
	}
	id := q.GetQuota().GetId()
	e.waitStatus(id, "Active")
	if _, err := c.UpdateQuota(op, &quotav1.UpdateQuotaRequest{QuotaId: id, MaxUnits: new(int32(5))}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteQuota(op, &quotav1.DeleteQuotaRequest{QuotaId: id}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(id, "Deleted")
	want := map[string][2]string{
		"TenantCreated": {"adm_7zaw", "192.0.2.7"}, "ClusterCreated": {"adm_7zaw", "192.0.2.7"},
		"InventorySet": {"adm_7zaw", "192.0.2.7"}, "QuotaCreated": {"adm_7zaw", "192.0.2.7"},
		"QuotaUpdated": {"adm_7zaw", "192.0.2.7"}, "QuotaUnsubscribed": {"adm_7zaw", "192.0.2.7"},
		"QuotaProduced": {"quota", ""}, "QuotaDeleted": {"quota", ""},
	}
	rows, err := e.pool.Query(context.Background(), `SELECT event_type, payload FROM events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var typ string
		var payload []byte
		if err := rows.Scan(&typ, &payload); err != nil {
			t.Fatal(err)
		}
		w, ok := want[typ]
		if !ok {
			continue
		}
		var env quotav1.QuotaEvent
		if err := proto.Unmarshal(payload, &env); err != nil {
			t.Fatal(err)
		}
		if env.GetActor() != w[0] || env.GetActorIp() != w[1] {
			t.Errorf("%s %s recorded by %q from %q, want %q from %q", env.GetAggregateId(), typ, env.GetActor(), env.GetActorIp(), w[0], w[1])
		}
		seen[typ] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for typ := range want {
		if !seen[typ] {
			t.Errorf("no %s recorded", typ)
		}
	}
}
