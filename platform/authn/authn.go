// Package authn carries the authenticated caller from the gateway, the only
// public edge, to the internal services over gRPC metadata.
//
// The gateway authenticates API keys and agent tokens, then calls internal
// services with the caller's Principal in metadata plus the internal token.
// Internal services install the interceptors of this package: a call
// without the right internal token is refused (Unauthenticated), so a
// client that reaches an internal port directly cannot claim to be any
// tenant. Incoming principal metadata from the public side never passes
// through: the gateway builds outgoing metadata from scratch.
package authn

import (
	"context"
	"crypto/subtle"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Kind says what authenticated the caller.
type Kind string

const (
	// KindUser is a tenant's API key.
	KindUser Kind = "user"
	// KindAgent is an executor agent's token.
	KindAgent Kind = "agent"
	// KindAdmin is an operator credential: may act on any tenant.
	KindAdmin Kind = "admin"
)

// Principal is an authenticated caller.
type Principal struct {
	Kind Kind
	// TenantID is the tenant a user acts for, or the tenant an agent serves
	// ("" for an agent of the shared pool, which serves every tenant).
	TenantID string
	// Subject identifies the credential: an API key id or an agent id.
	Subject string
	// AgentID is set for agents: the only agent_id their requests may use.
	AgentID string
	// RemoteIP is the caller's address as the gateway saw it.
	RemoteIP string
	// Tier is the tenant's tier (e.g. premium, standard), when known.
	Tier string
}

// Metadata keys.
const (
	MDKind          = "x-taskmesh-principal-kind"
	MDTenant        = "x-taskmesh-tenant"
	MDSubject       = "x-taskmesh-subject"
	MDAgent         = "x-taskmesh-agent"
	MDRemoteIP      = "x-taskmesh-remote-ip"
	MDTier          = "x-taskmesh-tier"
	MDInternalToken = "x-taskmesh-internal-token"
)

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal of the call, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// ErrNoPrincipal is returned by Require when the call carries none.
var ErrNoPrincipal = errors.New("authn: no authenticated caller")

// Require returns the principal of the call or an Unauthenticated status.
func Require(ctx context.Context) (Principal, error) {
	p, ok := FromContext(ctx)
	if !ok {
		return Principal{}, status.Error(codes.Unauthenticated, ErrNoPrincipal.Error())
	}
	return p, nil
}

// Outgoing returns ctx with outgoing metadata that names p and carries the
// internal token. Existing outgoing metadata other than these keys is kept
// (e.g. trace context, request ids).
func Outgoing(ctx context.Context, p Principal, internalToken string) context.Context {
	// FromOutgoingContext answers a copy, the caller's to change.
	md, _ := metadata.FromOutgoingContext(ctx)
	if md == nil {
		md = make(metadata.MD, 7)
	}
	SetOutgoing(md, p, internalToken)
	return metadata.NewOutgoingContext(ctx, md)
}

// SetOutgoing writes into md, replacing what it held under their keys,
// the metadata that names p and carries the internal token: what Outgoing
// adds, for a caller building its outgoing metadata anew, which saves the
// copy Outgoing makes of what the context already holds.
func SetOutgoing(md metadata.MD, p Principal, internalToken string) {
	// The keys are lower case already, as metadata.MD.Set would make
	// them; the values share one array: this runs on every call a gateway
	// forwards.
	vals := [...]string{string(p.Kind), p.TenantID, p.Subject, p.AgentID, p.RemoteIP, p.Tier, internalToken}
	for i, k := range [...]string{MDKind, MDTenant, MDSubject, MDAgent, MDRemoteIP, MDTier, MDInternalToken} {
		md[k] = vals[i : i+1 : i+1]
	}
}

// fromIncoming checks the internal token and reads the principal.
func fromIncoming(ctx context.Context, internalToken string) (context.Context, error) {
	// Key by key: FromIncomingContext would copy all of the metadata to
	// read these few keys, on every call.
	first := func(key string) string {
		if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	got := first(MDInternalToken)
	if internalToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(internalToken)) != 1 {
		return ctx, status.Error(codes.Unauthenticated, "internal service: missing or wrong internal token")
	}
	p := Principal{
		Kind:     Kind(first(MDKind)),
		TenantID: first(MDTenant),
		Subject:  first(MDSubject),
		AgentID:  first(MDAgent),
		RemoteIP: first(MDRemoteIP),
		Tier:     first(MDTier),
	}
	switch p.Kind {
	case KindUser:
		if p.TenantID == "" {
			return ctx, status.Error(codes.Unauthenticated, "internal service: user principal without tenant")
		}
	case KindAgent:
		if p.AgentID == "" {
			return ctx, status.Error(codes.Unauthenticated, "internal service: agent principal without agent id")
		}
	case KindAdmin:
	default:
		return ctx, status.Errorf(codes.Unauthenticated, "internal service: unknown principal kind %q", p.Kind)
	}
	return NewContext(ctx, p), nil
}

// UnaryServerInterceptor admits only calls carrying internalToken and puts
// their principal in the context. Health checks pass unauthenticated.
func UnaryServerInterceptor(internalToken string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if isHealth(info.FullMethod) {
			return handler(ctx, req)
		}
		ctx, err := fromIncoming(ctx, internalToken)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams.
func StreamServerInterceptor(internalToken string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if isHealth(info.FullMethod) {
			return handler(srv, ss)
		}
		ctx, err := fromIncoming(ss.Context(), internalToken)
		if err != nil {
			return err
		}
		return handler(srv, &wrapped{ServerStream: ss, ctx: ctx})
	}
}

type wrapped struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *wrapped) Context() context.Context { return w.ctx }

func isHealth(method string) bool {
	return method == "/grpc.health.v1.Health/Check" || method == "/grpc.health.v1.Health/Watch"
}
