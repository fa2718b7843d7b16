// Package ports holds what the consumers' gRPC servers (audit, usage,
// webhooks) share: who the caller is.
package ports

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/authn"
)

// CallerOf reads the caller from ctx's principal: a tenant's API key
// (tenant set) or an operator (operator true); the use cases scope what
// they read and change by it. Only those keys call these APIs: any other
// credential (an agent's) is refused with PermissionDenied, "a <kind>
// credential cannot <what>".
func CallerOf(ctx context.Context, what string) (tenant string, operator bool, err error) {
	p, err := authn.Require(ctx)
	if err != nil {
		return "", false, err
	}
	switch p.Kind {
	case authn.KindAdmin:
		return "", true, nil
	case authn.KindUser:
		return p.TenantID, false, nil
	}
	return "", false, status.Errorf(codes.PermissionDenied, "a %s credential cannot %s", p.Kind, what)
}
