package ports

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// OperatorOnly names exactly the QuotaService methods whose use cases
// refuse a tenant's key: each is called here by a tenant with an empty
// request, which the use cases judge before anything else.
func TestOperatorOnlyMatchesTheUseCases(t *testing.T) {
	s, _ := server(t, 8)
	tenant := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: "k"})
	sd := quotav1.QuotaService_ServiceDesc
	for _, m := range sd.Methods {
		full := "/" + sd.ServiceName + "/" + m.MethodName
		method := reflect.ValueOf(s).MethodByName(m.MethodName)
		req := reflect.New(method.Type().In(1).Elem())
		out := method.Call([]reflect.Value{reflect.ValueOf(tenant), req})
		err, _ := out[1].Interface().(error)
		refused := status.Code(err) == codes.PermissionDenied
		if refused != OperatorOnly[full] {
			t.Errorf("%s by a tenant: %v; listed as operator only: %v", m.MethodName, err, OperatorOnly[full])
		}
	}
}

func TestAuthorizeRefusesTenantKeysOnOperatorActions(t *testing.T) {
	tenant := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: "k"})
	ops := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAdmin, Subject: "ops"})
	for method := range OperatorOnly {
		if err := Authorize(tenant, method); status.Code(err) != codes.PermissionDenied ||
			!strings.Contains(status.Convert(err).Message(), "operator") {
			t.Errorf("%s by a tenant: %v, want PermissionDenied", method, err)
		}
		if err := Authorize(ops, method); err != nil {
			t.Errorf("%s by an operator: %v", method, err)
		}
	}
	for _, method := range []string{quotav1.QuotaService_GetQuota_FullMethodName, quotav1.AdmissionService_ListClusterQueues_FullMethodName} {
		if err := Authorize(tenant, method); err != nil {
			t.Errorf("%s by a tenant: %v, want it let through", method, err)
		}
	}
}
