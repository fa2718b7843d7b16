package ports

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// QuotaServer implements quotav1.QuotaServiceServer. Requests arrive
// validated (protovalidate interceptor) and authenticated.
type QuotaServer struct {
	quotav1.UnimplementedQuotaServiceServer
	App *app.App
	Log *slog.Logger
}

// caller maps the principal: operators act on every tenant, a tenant's key
// on its own; agents have no business here.
func caller(ctx context.Context) (app.Caller, error) {
	p, err := authn.Require(ctx)
	if err != nil {
		return app.Caller{}, err
	}
	switch p.Kind {
	case authn.KindAdmin:
		// Its changes are recorded as the operator key's, from the
		// address the gateway saw (docs/api/audit.md#an-entry).
		return app.Caller{Admin: true, Actor: app.Actor{ID: p.Subject, IP: p.RemoteIP}}, nil
	case authn.KindUser:
		if p.TenantID != "" {
			return app.Caller{TenantID: p.TenantID}, nil
		}
	}
	return app.Caller{}, status.Error(codes.PermissionDenied, "this credential may not use the quota service")
}

// serve runs one RPC for the caller in ctx: the caller's rights first,
// then the use case, whose error is mapped to a status in one place.
func serve[T any](ctx context.Context, log *slog.Logger, do func(c app.Caller) (T, error)) (T, error) {
	var zero T
	c, err := caller(ctx)
	if err != nil {
		return zero, err
	}
	out, err := do(c)
	if err != nil {
		return zero, toStatus(log, err)
	}
	return out, nil
}

func visibleTenant(c app.Caller, tenant string) bool { return c.Admin || c.TenantID == tenant }

// RegisterTenant implements quotav1.QuotaServiceServer.
func (s *QuotaServer) RegisterTenant(ctx context.Context, r *quotav1.RegisterTenantRequest) (*quotav1.RegisterTenantResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.RegisterTenantResponse, error) {
		t, err := s.App.RegisterTenant(ctx, c, r.GetTenantId(), r.GetName())
		if err != nil {
			return nil, err
		}
		return &quotav1.RegisterTenantResponse{Tenant: tenantToProto(t)}, nil
	})
}

// GetTenant implements quotav1.QuotaServiceServer.
func (s *QuotaServer) GetTenant(ctx context.Context, r *quotav1.GetTenantRequest) (*quotav1.GetTenantResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.GetTenantResponse, error) {
		t, err := s.App.GetTenant(ctx, c, r.GetTenantId())
		if err != nil {
			return nil, err
		}
		return &quotav1.GetTenantResponse{Tenant: tenantToProto(t)}, nil
	})
}

// ListTenants implements quotav1.QuotaServiceServer.
func (s *QuotaServer) ListTenants(ctx context.Context, _ *quotav1.ListTenantsRequest) (*quotav1.ListTenantsResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.ListTenantsResponse, error) {
		ts, err := s.App.ListTenants(ctx, c)
		if err != nil {
			return nil, err
		}
		out := &quotav1.ListTenantsResponse{}
		for _, t := range ts {
			out.Tenants = append(out.Tenants, tenantToProto(t))
		}
		return out, nil
	})
}

// CreateCluster implements quotav1.QuotaServiceServer.
func (s *QuotaServer) CreateCluster(ctx context.Context, r *quotav1.CreateClusterRequest) (*quotav1.CreateClusterResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.CreateClusterResponse, error) {
		cl, err := s.App.CreateCluster(ctx, c, r.GetName(), r.GetDescription())
		if err != nil {
			return nil, err
		}
		return &quotav1.CreateClusterResponse{Cluster: clusterToProto(cl)}, nil
	})
}

// GetCluster implements quotav1.QuotaServiceServer.
func (s *QuotaServer) GetCluster(ctx context.Context, r *quotav1.GetClusterRequest) (*quotav1.GetClusterResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.GetClusterResponse, error) {
		cl, err := s.App.GetCluster(ctx, c, r.GetCluster())
		if err != nil {
			return nil, err
		}
		return &quotav1.GetClusterResponse{Cluster: clusterToProto(cl)}, nil
	})
}

// ListClusters implements quotav1.QuotaServiceServer.
func (s *QuotaServer) ListClusters(ctx context.Context, _ *quotav1.ListClustersRequest) (*quotav1.ListClustersResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.ListClustersResponse, error) {
		cls, err := s.App.ListClusters(ctx, c)
		if err != nil {
			return nil, err
		}
		out := &quotav1.ListClustersResponse{}
		for _, cl := range cls {
			out.Clusters = append(out.Clusters, clusterToProto(cl))
		}
		return out, nil
	})
}

// SetInventory implements quotav1.QuotaServiceServer.
func (s *QuotaServer) SetInventory(ctx context.Context, r *quotav1.SetInventoryRequest) (*quotav1.SetInventoryResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.SetInventoryResponse, error) {
		inv, err := s.App.SetInventory(ctx, c, r.GetCluster(), r.GetMachineType(), int64(r.GetTotalGpus()))
		if err != nil {
			return nil, err
		}
		return &quotav1.SetInventoryResponse{Inventory: inventoryToProto(r.GetCluster(), inv)}, nil
	})
}

// GetInventory implements quotav1.QuotaServiceServer.
func (s *QuotaServer) GetInventory(ctx context.Context, r *quotav1.GetInventoryRequest) (*quotav1.GetInventoryResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.GetInventoryResponse, error) {
		cl, err := s.App.GetCluster(ctx, c, r.GetCluster())
		if err != nil {
			return nil, err
		}
		return &quotav1.GetInventoryResponse{Inventory: clusterToProto(cl).GetInventory()}, nil
	})
}

// CreateQuota implements quotav1.QuotaServiceServer.
func (s *QuotaServer) CreateQuota(ctx context.Context, r *quotav1.CreateQuotaRequest) (*quotav1.CreateQuotaResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.CreateQuotaResponse, error) {
		v, err := s.App.CreateQuota(ctx, c, capacity.CreateQuota{TenantID: r.GetTenantId(), Cluster: r.GetCluster(),
			Kind: capacity.Kind(r.GetKind()), ParentID: r.GetParentId(), Spec: specFromProto(r.GetSpec())})
		if err != nil {
			return nil, err
		}
		return &quotav1.CreateQuotaResponse{Quota: quotaToProto(v)}, nil
	})
}

// GetQuota implements quotav1.QuotaServiceServer.
func (s *QuotaServer) GetQuota(ctx context.Context, r *quotav1.GetQuotaRequest) (*quotav1.GetQuotaResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.GetQuotaResponse, error) {
		v, err := s.App.GetQuota(ctx, c, r.GetQuotaId())
		if err != nil {
			return nil, err
		}
		return &quotav1.GetQuotaResponse{Quota: quotaToProto(v)}, nil
	})
}

// ListQuotas implements quotav1.QuotaServiceServer: pages by id.
func (s *QuotaServer) ListQuotas(ctx context.Context, r *quotav1.ListQuotasRequest) (*quotav1.ListQuotasResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.ListQuotasResponse, error) {
		size := int(r.GetPageSize())
		if size == 0 {
			size = 100
		}
		vs, err := s.App.ListQuotas(ctx, c, app.QuotaFilter{TenantID: r.GetTenantId(), Cluster: r.GetCluster(), Kind: r.GetKind(),
			Status: r.GetStatus(), RootsOnly: r.GetRootsOnly(), After: r.GetPageToken(), Limit: size + 1})
		if err != nil {
			return nil, err
		}
		out := &quotav1.ListQuotasResponse{}
		if len(vs) > size {
			vs = vs[:size]
			out.NextPageToken = vs[size-1].Quota.ID
		}
		for _, v := range vs {
			out.Quotas = append(out.Quotas, quotaToProto(v))
		}
		return out, nil
	})
}

// UpdateQuota implements quotav1.QuotaServiceServer.
func (s *QuotaServer) UpdateQuota(ctx context.Context, r *quotav1.UpdateQuotaRequest) (*quotav1.UpdateQuotaResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.UpdateQuotaResponse, error) {
		var min, max *int64
		if r.MinUnits != nil {
			min = new(int64(r.GetMinUnits()))
		}
		if r.MaxUnits != nil {
			max = new(int64(r.GetMaxUnits()))
		}
		v, err := s.App.UpdateQuota(ctx, c, r.GetQuotaId(), min, max)
		if err != nil {
			return nil, err
		}
		return &quotav1.UpdateQuotaResponse{Quota: quotaToProto(v)}, nil
	})
}

// DeleteQuota implements quotav1.QuotaServiceServer.
func (s *QuotaServer) DeleteQuota(ctx context.Context, r *quotav1.DeleteQuotaRequest) (*quotav1.DeleteQuotaResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.DeleteQuotaResponse, error) {
		v, err := s.App.DeleteQuota(ctx, c, r.GetQuotaId(), r.GetReason())
		if err != nil {
			return nil, err
		}
		return &quotav1.DeleteQuotaResponse{Quota: quotaToProto(v)}, nil
	})
}

// GetWorkGroup implements quotav1.QuotaServiceServer.
func (s *QuotaServer) GetWorkGroup(ctx context.Context, r *quotav1.GetWorkGroupRequest) (*quotav1.GetWorkGroupResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.GetWorkGroupResponse, error) {
		w, err := s.App.GetWorkGroup(ctx, c, r.GetQuotaId())
		if err != nil {
			return nil, err
		}
		return &quotav1.GetWorkGroupResponse{WorkGroup: workGroupToProto(w)}, nil
	})
}

// ListWorkGroups implements quotav1.QuotaServiceServer.
func (s *QuotaServer) ListWorkGroups(ctx context.Context, r *quotav1.ListWorkGroupsRequest) (*quotav1.ListWorkGroupsResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.ListWorkGroupsResponse, error) {
		ws, err := s.App.ListWorkGroups(ctx, c, r.GetTenantId(), r.GetStatus())
		if err != nil {
			return nil, err
		}
		out := &quotav1.ListWorkGroupsResponse{}
		for _, w := range ws {
			out.WorkGroups = append(out.WorkGroups, workGroupToProto(w))
		}
		return out, nil
	})
}

// GetRayCluster implements quotav1.QuotaServiceServer.
func (s *QuotaServer) GetRayCluster(ctx context.Context, r *quotav1.GetRayClusterRequest) (*quotav1.GetRayClusterResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.GetRayClusterResponse, error) {
		ray, err := s.App.GetRayCluster(ctx, c, r.GetTenantId(), r.GetCluster())
		if err != nil {
			return nil, err
		}
		return &quotav1.GetRayClusterResponse{RayCluster: rayToProto(ray)}, nil
	})
}

// CheckGUQuota implements quotav1.QuotaServiceServer. A tenant's key checks
// its own tenant only: another tenant's quotas do not exist for it.
func (s *QuotaServer) CheckGUQuota(ctx context.Context, r *quotav1.CheckGUQuotaRequest) (*quotav1.CheckGUQuotaResponse, error) {
	return serve(ctx, s.Log, func(c app.Caller) (*quotav1.CheckGUQuotaResponse, error) {
		if !visibleTenant(c, r.GetTenantId()) {
			return nil, app.GUQuotaNotExists(r.GetTenantId(), r.GetQuota())
		}
		wg, err := s.App.CheckGUQuota(ctx, r.GetTenantId(), r.GetQuota())
		if err != nil {
			return nil, err
		}
		w, err := s.App.GetWorkGroup(ctx, app.Caller{Admin: true}, wg.QuotaID)
		if err != nil {
			return nil, err
		}
		return &quotav1.CheckGUQuotaResponse{QuotaId: wg.QuotaID, QuotaName: wg.Quota, WorkGroup: workGroupToProto(w)}, nil
	})
}
