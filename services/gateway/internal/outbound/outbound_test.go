package outbound

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestContextBuildsMetadataFromScratch(t *testing.T) {
	p := authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: "key_1", RemoteIP: "192.0.2.1", Tier: "premium"}
	ctx := authn.NewContext(context.Background(), p)
	ctx = requestid.NewContext(ctx, "req-1")
	ctx = ExtractTrace(ctx, traceparent, "vendor=1")
	// What grpc-gateway or a client may have put there must not survive.
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(
		"authorization", "Bearer tm_secret", "x-taskmesh-tenant", "evil", "x-forwarded-for", "1.2.3.4", "baggage", "k=v"))

	out, err := Context(ctx, "/taskmesh.task.v1.TaskService/GetTask", "internal-secret")
	if err != nil {
		t.Fatal(err)
	}
	md, _ := metadata.FromOutgoingContext(out)
	want := map[string]string{
		authn.MDKind: "user", authn.MDTenant: "acme", authn.MDSubject: "key_1", authn.MDAgent: "",
		authn.MDRemoteIP: "192.0.2.1", authn.MDTier: "premium", authn.MDInternalToken: "internal-secret",
		"x-request-id": "req-1", "traceparent": traceparent, "tracestate": "vendor=1",
	}
	var keys []string
	for k, v := range md {
		keys = append(keys, k)
		if len(v) != 1 || v[0] != want[k] {
			t.Errorf("%s = %q, want [%q]", k, v, want[k])
		}
	}
	if len(keys) != len(want) {
		slices.Sort(keys)
		t.Errorf("keys = %v, want exactly %d keys", keys, len(want))
	}
}

func TestContextRefuses(t *testing.T) {
	agent := authn.NewContext(context.Background(), authn.Principal{Kind: authn.KindAgent, AgentID: "a"})
	tests := []struct {
		name   string
		ctx    context.Context
		method string
		want   codes.Code
	}{
		{"no principal", context.Background(), "/taskmesh.task.v1.TaskService/GetTask", codes.Unauthenticated},
		{"agent on task service", agent, "/taskmesh.task.v1.TaskService/GetTask", codes.PermissionDenied},
		{"agent on lease service", agent, "/taskmesh.task.v1.LeaseService/ClaimTasks", codes.OK},
	}
	for _, tt := range tests {
		_, err := Context(tt.ctx, tt.method, "tok")
		if got := status.Code(err); got != tt.want {
			t.Errorf("%s: code %v, want %v", tt.name, got, tt.want)
		}
	}
}
