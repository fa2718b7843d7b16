package ports

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/authn"
)

func TestCallerOf(t *testing.T) {
	user := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "acme"})
	if tenant, op, err := CallerOf(user, "read usage"); err != nil || tenant != "acme" || op {
		t.Errorf("an API key: %q, operator %v, %v; want tenant acme", tenant, op, err)
	}
	admin := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAdmin})
	if tenant, op, err := CallerOf(admin, "read usage"); err != nil || tenant != "" || !op {
		t.Errorf("an operator key: %q, operator %v, %v; want an operator of no tenant", tenant, op, err)
	}
	agent := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAgent, AgentID: "a"})
	_, _, err := CallerOf(agent, "read usage")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "credential cannot read usage") {
		t.Errorf("an agent token: %v, want PermissionDenied naming what it cannot do", err)
	}
	if _, _, err := CallerOf(context.Background(), "read usage"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no credential: %v, want Unauthenticated", err)
	}
}
