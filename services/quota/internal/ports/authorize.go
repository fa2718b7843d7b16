package ports

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
)

// OperatorOnly are the quota server's methods a tenant's key may never
// call (docs/api/quota.md, the "who" columns). The use cases refuse them
// too; this list only puts that answer before the request's validation.
var OperatorOnly = map[string]bool{
	quotav1.QuotaService_RegisterTenant_FullMethodName:         true,
	quotav1.QuotaService_ListTenants_FullMethodName:            true,
	quotav1.QuotaService_CreateCluster_FullMethodName:          true,
	quotav1.QuotaService_SetInventory_FullMethodName:           true,
	quotav1.QuotaService_CreateQuota_FullMethodName:            true,
	quotav1.QuotaService_UpdateQuota_FullMethodName:            true,
	quotav1.QuotaService_DeleteQuota_FullMethodName:            true,
	quotav1.AdmissionService_PutClusterQueue_FullMethodName:    true,
	quotav1.AdmissionService_DeleteClusterQueue_FullMethodName: true,
	quotav1.AdmissionService_PutCohort_FullMethodName:          true,
	quotav1.AdmissionService_DeleteCohort_FullMethodName:       true,
	quotav1.AdmissionService_PutLocalQueue_FullMethodName:      true,
	quotav1.AdmissionService_DeleteLocalQueue_FullMethodName:   true,
}

// Authorize answers a tenant's key calling an operator action with
// PermissionDenied, whatever its request holds: "403, not 400" for a body
// that would not have been valid either (grpcserver.Options.Authorize).
func Authorize(ctx context.Context, fullMethod string) error {
	if !OperatorOnly[fullMethod] {
		return nil
	}
	if p, ok := authn.FromContext(ctx); ok && p.Kind == authn.KindUser {
		return status.Error(codes.PermissionDenied, app.ErrForbidden.Error())
	}
	return nil
}
