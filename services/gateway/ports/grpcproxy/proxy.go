package grpcproxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/domain/textcut"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/logthrottle"
	"github.com/taskmesh/taskmesh/services/gateway/internal/access"
	"github.com/taskmesh/taskmesh/services/gateway/internal/clientip"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
	"github.com/taskmesh/taskmesh/services/gateway/internal/edge"
	"github.com/taskmesh/taskmesh/services/gateway/internal/outbound"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// outages writes the failures every call meets while the credential store
// is down as one line per window (package logthrottle).
var outages = logthrottle.New(logthrottle.Window)

// Authenticator checks a bearer secret used from an address (see
// credentials.Store.Authenticate for the errors).
type Authenticator interface {
	Authenticate(ctx context.Context, bearer, remoteIP string) (authn.Principal, error)
}

// Options configure the front door.
type Options struct {
	// Upstream is the connection to the scheduler; it must carry the
	// interceptors of package outbound.
	Upstream grpc.ClientConnInterface
	// QuotaUpstream, if set, receives the quota service's calls
	// (taskmesh.quota.v1.*), with the same interceptors.
	QuotaUpstream grpc.ClientConnInterface
	// ConsumersUpstream, if set, receives the consumers service's calls
	// (access.ConsumerMethods), with the same interceptors.
	ConsumersUpstream grpc.ClientConnInterface
	Auth              Authenticator
	// TrustedProxies may set x-forwarded-for (see package clientip).
	TrustedProxies []netip.Prefix
	// Health is served as grpc.health.v1.
	Health *health.Server
	Logger *slog.Logger
	// ServerOptions are appended (e.g. message size limits).
	ServerOptions []grpc.ServerOption
	// Throttle, if not nil, is asked before each call of an authenticated
	// caller; a non-nil error (a status) refuses the call.
	Throttle func(ctx context.Context, p authn.Principal) error
	// Register, if not nil, registers services the gateway serves itself
	// (the admin API) instead of proxying; they must be unary. Their calls
	// are authenticated, checked by package access, throttled and checked
	// for bad input like proxied ones; the principal is in the handler's
	// context (authn.FromContext).
	Register func(grpc.ServiceRegistrar)
	// Services are the full names of the proxied services that server
	// reflection lists (with the ones Register adds and health).
	Services []string
}

// NewServer returns the front door's gRPC server.
func NewServer(opts Options) *grpc.Server {
	p := &proxy{upstream: opts.Upstream, quota: opts.QuotaUpstream, consumers: opts.ConsumersUpstream, auth: opts.Auth,
		trusted: opts.TrustedProxies, log: opts.Logger, throttle: opts.Throttle, local: localRegistrar{}, metrics: newCallMetrics()}
	if opts.Register != nil {
		opts.Register(p.local)
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.UnknownServiceHandler(p.handle),
		grpc.ForceServerCodec(codec{}),
		// Answers every stream's request id and admits the reflection
		// service; the unknown-service handler admits its calls itself,
		// and health needs no credentials.
		grpc.StreamInterceptor(p.streamLocal),
		grpc.UnaryInterceptor(unaryLocal),
	}, opts.ServerOptions...)...)
	healthpb.RegisterHealthServer(srv, opts.Health)
	registerReflection(srv, p.local.serviceNames(append(slices.Clone(opts.Services),
		healthpb.Health_ServiceDesc.ServiceName, v1reflectiongrpc.ServerReflection_ServiceDesc.ServiceName)))
	return srv
}

type proxy struct {
	upstream grpc.ClientConnInterface
	quota    grpc.ClientConnInterface
	// consumers is nil when the consumers service is not configured.
	consumers grpc.ClientConnInterface
	auth      Authenticator
	trusted   []netip.Prefix
	log       *slog.Logger
	throttle  func(ctx context.Context, p authn.Principal) error
	local     localRegistrar
	metrics   callMetrics
}

// quotaMethods prefixes the quota service's methods, which go to
// Options.QuotaUpstream.
const quotaMethods = "/taskmesh.quota.v1."

// bothStreams describes a call as client- and server-streaming, which fits
// every kind of RPC: a unary call is a stream of one message each way.
var bothStreams = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

func (p *proxy) handle(_ any, ss grpc.ServerStream) (err error) {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "grpcproxy: no method in stream")
	}
	start := time.Now()
	defer func() { p.metrics.record(ss.Context(), method, status.Code(err), time.Since(start)) }()
	in, _ := metadata.FromIncomingContext(ss.Context())
	// streamLocal, which every stream passes first, chose and answered it.
	id := requestid.FromContext(ss.Context())

	principal, err := p.admit(ss.Context(), in, method, id)
	if err != nil {
		return err
	}

	// The outgoing context keeps the client's deadline and cancellation;
	// its metadata is rebuilt by the outbound interceptor from these values
	// only.
	ctx := authn.NewContext(ss.Context(), principal)
	ctx = requestid.NewContext(ctx, id)
	ctx = outbound.ExtractTrace(ctx, first(in, "traceparent"), first(in, "tracestate"))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if m, ok := p.local[method]; ok {
		return m.serve(ctx, ss, method)
	}
	upstream := p.upstream
	switch {
	case strings.HasPrefix(method, quotaMethods):
		if p.quota == nil {
			return status.Error(codes.Unimplemented, "the quota service is not configured")
		}
		upstream = p.quota
	case access.IsConsumerMethod(method):
		if p.consumers == nil {
			return status.Error(codes.Unimplemented, "the consumers service is not configured")
		}
		upstream = p.consumers
	}
	cs, err := upstream.NewStream(ctx, bothStreams, method, grpc.ForceCodec(codec{}))
	if err != nil {
		return err
	}
	upErr := make(chan error, 1)
	downErr := make(chan error, 1)
	go func() { upErr <- forwardUp(ss, cs, method) }()
	go func() { downErr <- forwardDown(cs, ss) }()
	for {
		select {
		case err := <-upErr:
			if err != nil {
				// The client's side broke (cancelled, reset) or sent bad
				// input: abandon the upstream call; cancel() is deferred.
				return status.Convert(err).Err()
			}
			// The client half-closed normally; wait for the answer.
			upErr = nil
		case err := <-downErr:
			// The scheduler finished: its status (nil for OK) is the
			// call's, with code, message and details untouched.
			return err
		}
	}
}

// admit authenticates the caller, checks the method is theirs to call and
// charges their rate limits; the error is the status to answer with.
func (p *proxy) admit(ctx context.Context, in metadata.MD, method, id string) (authn.Principal, error) {
	if method == access.HeartbeatMethod {
		ctx = credentials.ForHeartbeat(ctx)
	}
	principal, err := p.authenticate(ctx, in)
	if err != nil {
		p.log.Info("grpc call refused", "method", method, "request_id", id, "reason", status.Convert(err).Message())
		return authn.Principal{}, err
	}
	if methodLabel(method) == methodUnknown {
		// Which kind of credential may call a method is judged only for
		// methods that exist: one no service has is Unimplemented whoever
		// calls, as a REST path no route serves is 404, and is never
		// forwarded (docs/api/README.md#grpc). The name is the client's:
		// bounded, and valid UTF-8.
		name := textcut.Bytes(method, maxEchoedMethod)
		p.log.Info("grpc call refused", "method", name, "request_id", id, "reason", "unknown method")
		return authn.Principal{}, unimplemented("unknown method " + name)
	}
	if err := access.Method(principal, method); err != nil {
		p.log.Info("grpc call refused", "method", method, "request_id", id, "reason", err.Error())
		return authn.Principal{}, forbidden(err.Error())
	}
	if p.throttle != nil {
		if err := p.throttle(ctx, principal); err != nil {
			p.log.Info("grpc call refused", "method", method, "request_id", id, "reason", status.Convert(err).Message())
			return authn.Principal{}, withRateLimitInfo(err)
		}
	}
	return principal, nil
}

// The gateway's own refusals carry the ErrorInfo of the code REST answers
// them with (401, 403, 429 reuse the HTTP status), so a gRPC client reads
// the same business code whichever transport it uses.
func unauthenticated(msg string) error {
	return grpcserver.Status(codes.Unauthenticated, http.StatusUnauthorized, "UNAUTHENTICATED", msg)
}

func forbidden(msg string) error {
	return grpcserver.Status(codes.PermissionDenied, http.StatusForbidden, "PERMISSION_DENIED", msg)
}

// maxEchoedMethod bounds how much of an unknown method's name a refusal
// repeats; the longest method Taskmesh has is under 100 bytes.
const maxEchoedMethod = 256

func unimplemented(msg string) error {
	return grpcserver.Status(codes.Unimplemented, http.StatusNotFound, "NOT_FOUND", msg)
}

// withRateLimitInfo adds the 429 ErrorInfo to a rate-limit refusal,
// keeping its RetryInfo; any other status passes as it is.
func withRateLimitInfo(err error) error {
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || grpcserver.Code(err) != 0 {
		return err
	}
	info := &errdetails.ErrorInfo{Domain: grpcserver.ErrorDomain, Reason: "RESOURCE_EXHAUSTED",
		Metadata: map[string]string{"code": strconv.Itoa(http.StatusTooManyRequests)}}
	if d, derr := st.WithDetails(info); derr == nil {
		return d.Err()
	}
	return err
}

// streamLocal runs first on every stream, proxied ones included: it
// chooses the request id and answers it before anything can fail, so
// refusals carry it too (grpc sends the header with the first message or,
// for an error, ahead of the status), and hands it on in the context. It
// admits the calls of the streaming services the server knows
// (reflection); proxied and local calls reach the unknown-service
// handler, which admits them itself, and health needs no credentials.
func (p *proxy) streamLocal(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	in, _ := metadata.FromIncomingContext(ss.Context())
	id := requestid.Ensure(first(in, requestid.MetadataKey))
	// Fails only once headers are sent, which nothing has done yet.
	_ = ss.SetHeader(metadata.Pairs(requestid.MetadataKey, id))
	ss = withContext{ServerStream: ss, ctx: requestid.NewContext(ss.Context(), id)}
	if !strings.HasPrefix(info.FullMethod, reflectionMethods) {
		return handler(srv, ss)
	}
	if _, err := p.admit(ss.Context(), in, info.FullMethod, id); err != nil {
		return err
	}
	return handler(srv, ss)
}

// unaryLocal echoes the request id on the unary calls the server knows
// (health's Check), which need no credentials.
func unaryLocal(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	in, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs(requestid.MetadataKey, requestid.Ensure(first(in, requestid.MetadataKey))))
	return handler(ctx, req)
}

// withContext is a stream whose context carries the request id.
type withContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s withContext) Context() context.Context { return s.ctx }

// authenticate reads the bearer secret from the "authorization" metadata.
func (p *proxy) authenticate(ctx context.Context, in metadata.MD) (authn.Principal, error) {
	bearer, ok := credentials.FromAuthorization(first(in, "authorization"))
	if !ok {
		return authn.Principal{}, unauthenticated("missing bearer token in authorization metadata")
	}
	var addr string
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		addr = pr.Addr.String()
	}
	ip := clientip.Resolve(addr, in.Get("x-forwarded-for"), p.trusted)
	principal, err := p.auth.Authenticate(ctx, bearer, ip)
	var ae *credentials.AuthError
	switch {
	case err == nil:
		return principal, nil
	case errors.As(err, &ae) && errors.Is(err, credentials.ErrForbidden):
		return authn.Principal{}, forbidden(ae.Reason)
	case errors.As(err, &ae):
		return authn.Principal{}, unauthenticated(ae.Reason)
	default:
		outages.Log(ctx, p.log, slog.LevelError, "authenticating a grpc call failed", "err", err)
		return authn.Principal{}, grpcserver.Status(codes.Unavailable, grpcserver.CodeInternal, "UNAVAILABLE", "credential store unavailable")
	}
}

// forwardUp copies the client's messages to the scheduler, then
// half-closes. A nil return means the client half-closed normally. A
// message with bad input (package edge) is not forwarded: the error ends
// the call.
func forwardUp(ss grpc.ServerStream, cs grpc.ClientStream, method string) error {
	for {
		f := &frame{}
		if err := ss.RecvMsg(f); err != nil {
			if errors.Is(err, io.EOF) {
				return cs.CloseSend()
			}
			return err
		}
		if err := edge.CheckFrame(method, f.payload); err != nil {
			return err
		}
		if err := cs.SendMsg(f); err != nil {
			// io.EOF: the scheduler already ended the call; forwardDown
			// reports how. Stop reading from the client.
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// forwardDown copies the scheduler's headers, messages and trailers to the
// client and returns the scheduler's final status.
func forwardDown(cs grpc.ClientStream, ss grpc.ServerStream) error {
	// Header blocks until the scheduler sends headers or the call fails;
	// on failure RecvMsg below returns the status.
	if md, err := cs.Header(); err == nil && len(md) > 0 {
		// The front door's request id is already set (streamLocal); a
		// service's own would answer it twice.
		md = md.Copy()
		md.Delete(requestid.MetadataKey)
		if err := ss.SendHeader(md); err != nil {
			return err
		}
	}
	for {
		f := &frame{}
		if err := cs.RecvMsg(f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
