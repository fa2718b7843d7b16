package grpcserver

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/taskmesh/taskmesh/platform/otel"
)

// Local serves the unary methods of the services registered on it to
// callers in the same process, without a network hop: it is a
// grpc.ServiceRegistrar for the service and a grpc.ClientConnInterface for
// its callers (docs/decisions/0080-in-process-scheduler-calls.md). A
// gateway running beside the scheduler in one process sends its REST
// calls through it instead of through loopback TCP and HTTP/2.
//
// A call sees what it would see over the network, because the same parts
// run on it: the request is marshalled and unmarshalled into a fresh
// message (so the handler shares no memory with the caller, unknown fields
// and invalid UTF-8 are handled as on the wire, and MaxRecvMsgBytes
// holds); the answer is handed over whole (handOver: the handler gives it
// up when it returns, as it does to a server that marshals it); the handler runs behind New's unary chain (panic recovery,
// internal authentication from the metadata, validation); its context
// carries the caller's deadline and cancellation, the outgoing metadata
// as incoming metadata and the trace context, and none of the caller's
// context values; and errors come back as the statuses a remote client
// would get. What it does not do: server-side tracing spans and gRPC stats
// (the caller's span continues instead), and streaming methods, which
// answer Unimplemented — callers send those over a real connection.
type Local struct {
	chain grpc.UnaryServerInterceptor

	mu       sync.RWMutex
	methods  map[string]localMethod // "/pkg.Service/Method"
	stopped  bool
	inflight sync.WaitGroup
	// cut ends the calls still running when Stop's grace is over.
	cut     context.Context
	cutCall context.CancelFunc
}

type localMethod struct {
	impl    any
	handler grpc.MethodHandler
}

// localAddr is the peer address of in-process calls.
type localAddr struct{}

func (localAddr) Network() string { return "local" }
func (localAddr) String() string  { return "local" }

// LocalAddr is the peer.Addr handlers see on a call through a Local.
var LocalAddr net.Addr = localAddr{}

// NewLocal returns a Local with New's unary chain.
func NewLocal(o Options) (*Local, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	v := protovalidate.GlobalValidator // the process's shared validator, as New's
	cut, cutCall := context.WithCancel(context.Background())
	return &Local{
		chain:   chainUnary(unaryChain(o, v)...),
		methods: map[string]localMethod{},
		cut:     cut, cutCall: cutCall,
	}, nil
}

// RegisterService implements grpc.ServiceRegistrar. Only unary methods are
// served; a stream of sd answers Unimplemented.
func (l *Local) RegisterService(sd *grpc.ServiceDesc, impl any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range sd.Methods {
		l.methods["/"+sd.ServiceName+"/"+m.MethodName] = localMethod{impl: impl, handler: m.Handler}
	}
}

// Stop stops l as Stop stops a server: new calls are refused at once
// (Unavailable, as a stopped server's address would answer), the calls in
// flight get up to grace (DefaultShutdownGrace if grace <= 0) to finish,
// and then their contexts are cancelled. It returns once every call has
// returned. Stop may be called more than once.
func (l *Local) Stop(grace time.Duration) {
	if grace <= 0 {
		grace = DefaultShutdownGrace
	}
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.inflight.Wait(); close(done) }()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		l.cutCall()
		<-done
	}
}

// Invoke implements grpc.ClientConnInterface. Call options other than
// grpc.Header, grpc.Trailer and grpc.Peer have no effect.
func (l *Local) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	l.mu.RLock()
	m, ok := l.methods[method]
	stopped := l.stopped
	if !stopped {
		l.inflight.Add(1)
	}
	l.mu.RUnlock()
	if stopped {
		return status.Error(codes.Unavailable, "grpcserver: the in-process server has stopped")
	}
	defer l.inflight.Done()
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	in, ok := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok || !ok2 {
		return status.Errorf(codes.Internal, "grpcserver: %s: %T and %T are not proto messages", method, args, reply)
	}
	wire, err := proto.Marshal(in)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	if len(wire) > MaxRecvMsgBytes {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(wire), MaxRecvMsgBytes)
	}
	stream := &localStream{method: method}
	sctx, cancel := context.WithCancel(serverContext(ctx, stream))
	defer cancel()
	defer context.AfterFunc(l.cut, cancel)()
	resp, err := m.handler(m.impl, sctx, func(v any) error {
		msg, ok := v.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "grpcserver: %s takes %T, not a proto message", method, v)
		}
		if err := proto.Unmarshal(wire, msg); err != nil {
			return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
		}
		return nil
	}, l.chain)
	stream.deliver(opts)
	if ctx.Err() != nil {
		// The caller gave up: a remote client sees its own context's
		// error, whatever the handler went on to return.
		return status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		// As the server does: a status stays as it is, a context error
		// becomes its code, anything else is Unknown.
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.FromContextError(err).Err()
	}
	rm, ok := resp.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "grpcserver: %s answered %T, not a proto message", method, resp)
	}
	return handOver(rm, out)
}

// handOver makes out the handler's answer: out takes answer's fields
// themselves, not copies of them. A gRPC server marshals an answer once
// its handler has returned and drops it, so a handler keeps no hold on
// what it answers; the caller, which owns out, now owns answer's fields.
// Copying them (marshal, unmarshal) cost the REST path more than its JSON
// encoding of the answer (docs/decisions/0111-in-process-answers-are-handed-over.md).
// An answer of another type than out (a handler bug) is copied through
// the wire format, as the network would.
func handOver(answer, out proto.Message) error {
	src, dst := answer.ProtoReflect(), out.ProtoReflect()
	if src.Descriptor() != dst.Descriptor() {
		b, err := proto.Marshal(answer)
		if err != nil {
			return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
		}
		if err := proto.Unmarshal(b, out); err != nil {
			return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
		}
		return nil
	}
	proto.Reset(out)
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return nil
}

// NewStream implements grpc.ClientConnInterface: streams need a real
// connection.
func (l *Local) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "grpcserver: the in-process server serves unary methods only")
}

// serverContext is the handler's context: the caller's deadline and
// cancellation, but none of its values (a handler making calls of its own
// must not send the caller's outgoing metadata on), with the caller's
// outgoing metadata as incoming metadata and the trace context it names,
// the local peer and the stream that collects headers and trailers.
func serverContext(caller context.Context, stream *localStream) context.Context {
	// FromOutgoingContext answers a copy: the handler cannot reach the
	// caller's metadata through it.
	md, _ := metadata.FromOutgoingContext(caller)
	if md == nil {
		md = metadata.MD{}
	}
	ctx := metadata.NewIncomingContext(detached{caller}, md)
	if tp := md.Get("traceparent"); len(tp) > 0 {
		carrier := map[string]string{"traceparent": tp[0]}
		if ts := md.Get("tracestate"); len(ts) > 0 {
			carrier["tracestate"] = ts[0]
		}
		ctx = otel.Extract(ctx, carrier)
	}
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: LocalAddr, LocalAddr: LocalAddr})
	return grpc.NewContextWithServerTransportStream(ctx, stream)
}

// detached is a context with its parent's deadline and cancellation and
// none of its values.
type detached struct{ parent context.Context }

func (d detached) Deadline() (time.Time, bool) { return d.parent.Deadline() }
func (d detached) Done() <-chan struct{}       { return d.parent.Done() }
func (d detached) Err() error                  { return d.parent.Err() }
func (d detached) Value(any) any               { return nil }

// AfterFunc lets contexts derived from a detached one follow its
// cancellation without a goroutine each (see context.AfterFunc).
func (d detached) AfterFunc(f func()) func() bool { return context.AfterFunc(d.parent, f) }

// localStream collects the headers and trailers a handler sets
// (grpc.SetHeader, grpc.SetTrailer) for the caller's grpc.Header and
// grpc.Trailer call options.
type localStream struct {
	method string

	mu              sync.Mutex
	header, trailer metadata.MD
}

func (s *localStream) Method() string { return s.method }

func (s *localStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *localStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *localStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// deliver hands the headers, trailers and peer to the call options that
// ask for them.
func (s *localStream) deliver(opts []grpc.CallOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = s.header.Copy()
		case grpc.TrailerCallOption:
			*o.TrailerAddr = s.trailer.Copy()
		case grpc.PeerCallOption:
			*o.PeerAddr = peer.Peer{Addr: LocalAddr, LocalAddr: LocalAddr}
		}
	}
}

// chainUnary runs interceptors in order around a handler, as
// grpc.ChainUnaryInterceptor does.
func chainUnary(interceptors ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var next func(i int) grpc.UnaryHandler
		next = func(i int) grpc.UnaryHandler {
			if i == len(interceptors) {
				return handler
			}
			return func(ctx context.Context, req any) (any, error) {
				return interceptors[i](ctx, req, info, next(i+1))
			}
		}
		return next(0)(ctx, req)
	}
}
