package authn

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// incoming turns what Outgoing produced into what a server receives.
func incoming(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	return metadata.NewIncomingContext(context.Background(), md)
}

func TestPrincipalTravelsWithTheRightToken(t *testing.T) {
	want := Principal{Kind: KindAgent, TenantID: "", Subject: "agent-1", AgentID: "agent-1", RemoteIP: "10.0.0.7", Tier: "standard"}
	ctx := Outgoing(context.Background(), want, "s3cret")
	var got Principal
	_, err := UnaryServerInterceptor("s3cret")(incoming(ctx), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
		func(ctx context.Context, _ any) (any, error) {
			got, _ = FromContext(ctx)
			return nil, nil
		})
	if err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
}

func TestRefusesWrongOrMissingTokenAndBadPrincipals(t *testing.T) {
	call := func(ctx context.Context) error {
		_, err := UnaryServerInterceptor("s3cret")(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
			func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	user := Principal{Kind: KindUser, TenantID: "t1", Subject: "key-1"}
	tests := map[string]context.Context{
		"wrong token":            incoming(Outgoing(context.Background(), user, "guess")),
		"no metadata":            context.Background(),
		"user without tenant":    incoming(Outgoing(context.Background(), Principal{Kind: KindUser, Subject: "k"}, "s3cret")),
		"agent without agent id": incoming(Outgoing(context.Background(), Principal{Kind: KindAgent}, "s3cret")),
		"unknown kind":           incoming(Outgoing(context.Background(), Principal{Kind: "root", TenantID: "t"}, "s3cret")),
	}
	for name, ctx := range tests {
		if err := call(ctx); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: err = %v, want Unauthenticated", name, err)
		}
	}
	// An empty configured token never admits anything.
	_, err := UnaryServerInterceptor("")(incoming(Outgoing(context.Background(), user, "")), nil,
		&grpc.UnaryServerInfo{FullMethod: "/x/Y"}, func(context.Context, any) (any, error) { return nil, nil })
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("empty token admitted: %v", err)
	}
}

func TestOutgoingReplacesForgedIdentity(t *testing.T) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), MDTenant, "victim", "traceparent", "00-abc")
	ctx = Outgoing(ctx, Principal{Kind: KindUser, TenantID: "t1", Subject: "k"}, "tok")
	md, _ := metadata.FromOutgoingContext(ctx)
	if got := md.Get(MDTenant); len(got) != 1 || got[0] != "t1" {
		t.Fatalf("tenant metadata = %v", got)
	}
	if got := md.Get("traceparent"); len(got) != 1 {
		t.Fatalf("trace context dropped: %v", md)
	}
}

func TestRequire(t *testing.T) {
	if _, err := Require(context.Background()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("err = %v", err)
	}
	p := Principal{Kind: KindAdmin, Subject: "ops"}
	if got, err := Require(NewContext(context.Background(), p)); err != nil || got != p {
		t.Fatalf("got %+v, %v", got, err)
	}
}
