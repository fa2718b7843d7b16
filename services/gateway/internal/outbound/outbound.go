// Package outbound builds the metadata of every call the gateway makes to an
// internal service, REST-originated or proxied from the gRPC front door.
//
// The metadata is built from scratch on each call: the authenticated
// principal and the internal token (authn.Outgoing), the request id, and the
// W3C trace context of the call's context. Nothing a client sent is copied:
// grpc-gateway forwards the Authorization header (the caller's secret) and
// X-Forwarded-For on its own, and a client could send x-taskmesh-tenant
// itself; all of that is dropped here, in one place that every call passes
// through. A call without an authenticated principal, or one its kind may not
// make (see package access), fails before leaving the process.
package outbound

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/services/gateway/internal/access"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// traceKeys are the trace context fields forwarded. Baggage is not: it is
// free-form data from outside that internal services would trust.
var traceKeys = []string{"traceparent", "tracestate"}

// DialOptions returns the interceptors to install on the client connection
// to internal services.
func DialOptions(internalToken string) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(UnaryInterceptor(internalToken)),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			ctx, err := Context(ctx, method, internalToken)
			if err != nil {
				return nil, err
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// UnaryInterceptor is DialOptions' interceptor of unary calls, for a
// connection that is not a grpc.ClientConn (an in-process server, see
// grpcserver.Local): it builds the call's metadata or refuses the call.
func UnaryInterceptor(internalToken string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, err := Context(ctx, method, internalToken)
		if err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// Context returns ctx with fresh outgoing metadata for a call of method, or
// a status error (Unauthenticated, PermissionDenied) when the call must not
// be made.
func Context(ctx context.Context, method, internalToken string) (context.Context, error) {
	p, ok := authn.FromContext(ctx)
	if !ok {
		// Only a gateway bug gets here: every port authenticates first.
		return ctx, status.Error(codes.Unauthenticated, "gateway: call without an authenticated caller")
	}
	check := access.Method
	if own, _ := ctx.Value(ownCallKey{}).(bool); own {
		check = access.OwnMethod
	}
	if err := check(p, method); err != nil {
		return ctx, status.Error(codes.PermissionDenied, err.Error())
	}
	// The outgoing metadata is built anew: nothing the context held (such
	// as what grpc-gateway annotated from the HTTP request) is forwarded.
	// The keys are lower case, as metadata.MD.Set would make them.
	md := make(metadata.MD, 10)
	if id := requestid.FromContext(ctx); id != "" {
		md[requestid.MetadataKey] = []string{id}
	}
	tc := otel.Inject(ctx)
	for _, k := range traceKeys {
		if v, ok := tc[k]; ok {
			md[k] = []string{v}
		}
	}
	authn.SetOutgoing(md, p, internalToken)
	return metadata.NewOutgoingContext(ctx, md), nil
}

// ownCallKey marks the context of a call the gateway makes for a service
// it serves itself.
type ownCallKey struct{}

// OwnCall marks ctx as the context of a call the gateway makes itself for
// a service it serves (the agent admin service asking the scheduler about
// the fleet), which access.OwnMethod checks instead of access.Method. A
// client's forwarded call never carries it: only the gateway's own code
// sets it.
func OwnCall(ctx context.Context) context.Context { return context.WithValue(ctx, ownCallKey{}, true) }

// ExtractTrace returns ctx with the remote span context named by a
// traceparent/tracestate pair received from a client, so outgoing calls
// continue the client's trace. Malformed values are ignored.
func ExtractTrace(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return otel.Extract(ctx, map[string]string{"traceparent": traceparent, "tracestate": tracestate})
}
