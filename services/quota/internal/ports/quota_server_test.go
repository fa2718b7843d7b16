package ports

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/app/apptest"
)

// server is QuotaServer over the use cases on the fake store, with one
// tenant acme and cluster c1 holding gpus A100s.
func server(t *testing.T, gpus int32) (*QuotaServer, context.Context) {
	t.Helper()
	a := app.New(apptest.NewStore(), func() time.Time { return time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC) }, nil, nil)
	s := &QuotaServer{App: a}
	ops := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAdmin, Subject: "ops"})
	if _, err := s.RegisterTenant(ops, &quotav1.RegisterTenantRequest{TenantId: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCluster(ops, &quotav1.CreateClusterRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetInventory(ops, &quotav1.SetInventoryRequest{Cluster: "c1", MachineType: "A100", TotalGpus: gpus}); err != nil {
		t.Fatal(err)
	}
	return s, ops
}

func produce(ctx context.Context, s *QuotaServer, name string, gpus int32) error {
	_, err := s.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: "c1", Kind: "GU",
		Spec: &quotav1.QuotaSpec{Name: name, MinUnits: gpus, MaxUnits: gpus, MachineType: "A100"}})
	return err
}

// Short inventory is FailedPrecondition with business code 31003, and no
// quota exists afterwards.
func TestCreateQuotaWithShortInventory(t *testing.T) {
	s, ops := server(t, 4)
	err := produce(ops, s, "gu1", 8)
	st, _ := status.FromError(err)
	var code string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			code = info.GetMetadata()["code"]
		}
	}
	if st.Code() != codes.FailedPrecondition || code != "31003" {
		t.Fatalf("8 GPUs of 4: %s with code %q (%v), want FailedPrecondition 31003", st.Code(), code, err)
	}
	got, err := s.ListQuotas(ops, &quotav1.ListQuotasRequest{})
	if err != nil || len(got.GetQuotas()) != 0 {
		t.Errorf("quotas after the refusal = %v, %v; want none", got.GetQuotas(), err)
	}
}

// ListQuotas pages by id through the filter it hands the use case.
func TestListQuotasPages(t *testing.T) {
	s, ops := server(t, 8)
	for _, name := range []string{"gu1", "gu2"} {
		if err := produce(ops, s, name, 1); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		res, err := s.ListQuotas(ops, &quotav1.ListQuotasRequest{TenantId: "acme", RootsOnly: true, PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range res.GetQuotas() {
			names = append(names, q.GetName())
		}
		if token = res.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(names) != 2 {
		t.Errorf("paged roots = %v, want gu1 and gu2 one page each", names)
	}
}
