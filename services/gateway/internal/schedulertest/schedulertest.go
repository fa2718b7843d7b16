// Package schedulertest runs a stand-in scheduler for the gateway's tests: a
// real gRPC server on 127.0.0.1 serving TaskService, LeaseService,
// AgentFleetService and VideoService behind
// the authn interceptors, as the real scheduler does. It records every call
// it admits (method, principal, metadata, request) and answers with what the
// test registered — a response, or a status with ErrorInfo details — so
// tests can check what the gateway forwards and how it maps answers.
package schedulertest

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
)

// Call is one call the fake admitted.
type Call struct {
	// Method is the short method name, e.g. "GetTask".
	Method    string
	Principal authn.Principal
	// MD is the incoming metadata exactly as received.
	MD      metadata.MD
	Request proto.Message
	// InProcess is true for a call through Fake.Local.
	InProcess bool
}

// UnaryFunc answers a unary call. It may set headers and trailers with
// grpc.SetHeader / grpc.SetTrailer on ctx.
type UnaryFunc func(ctx context.Context, req proto.Message) (proto.Message, error)

// WatchFunc answers TaskService.WatchTask.
type WatchFunc func(req *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error

// Fake is a running stand-in scheduler.
type Fake struct {
	// Addr is the address to dial.
	Addr string
	// Local serves the same services in-process (grpcserver.Local, with
	// its validation), as a scheduler in the gateway's process does.
	Local *grpcserver.Local

	mu    sync.Mutex
	calls []Call
	unary map[string]UnaryFunc
	watch WatchFunc
}

// Start serves a fake scheduler that admits only calls carrying
// internalToken, until the test ends.
func Start(t testing.TB, internalToken string) *Fake {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("schedulertest: listen: %v", err)
	}
	f := &Fake{Addr: lis.Addr().String(), unary: map[string]UnaryFunc{}}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(authn.UnaryServerInterceptor(internalToken)),
		grpc.ChainStreamInterceptor(authn.StreamServerInterceptor(internalToken)),
	)
	local, err := grpcserver.NewLocal(grpcserver.Options{InternalToken: internalToken})
	if err != nil {
		t.Fatalf("schedulertest: %v", err)
	}
	f.Local = local
	for _, r := range []grpc.ServiceRegistrar{srv, local} {
		taskv1.RegisterTaskServiceServer(r, &taskServer{f: f})
		taskv1.RegisterLeaseServiceServer(r, &leaseServer{f: f})
		taskv1.RegisterAgentFleetServiceServer(r, &fleetServer{f: f})
		videov1.RegisterVideoServiceServer(r, &videoServer{f: f})
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return f
}

// Handle sets the answer of a unary method ("GetTask", "ClaimTasks", …).
// Without one, a method answers an empty response.
func (f *Fake) Handle(method string, fn UnaryFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unary[method] = fn
}

// Respond makes method answer resp.
func (f *Fake) Respond(method string, resp proto.Message) {
	f.Handle(method, func(context.Context, proto.Message) (proto.Message, error) { return resp, nil })
}

// Fail makes method answer err.
func (f *Fake) Fail(method string, err error) {
	f.Handle(method, func(context.Context, proto.Message) (proto.Message, error) { return nil, err })
}

// HandleWatch sets the answer of WatchTask.
func (f *Fake) HandleWatch(fn WatchFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watch = fn
}

// Calls returns the calls admitted so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// LastCall returns the last admitted call; ok is false if there was none.
func (f *Fake) LastCall() (c Call, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return Call{}, false
	}
	return f.calls[len(f.calls)-1], true
}

// Reset forgets the recorded calls.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

func (f *Fake) record(ctx context.Context, method string, req proto.Message) {
	p, _ := authn.FromContext(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	pr, _ := peer.FromContext(ctx)
	f.calls = append(f.calls, Call{Method: method, Principal: p, MD: md.Copy(), Request: proto.Clone(req),
		InProcess: pr != nil && pr.Addr == grpcserver.LocalAddr})
}

// call records a unary call and runs its handler; empty is the default
// answer.
func call[Resp proto.Message](f *Fake, ctx context.Context, method string, req proto.Message, empty Resp) (Resp, error) {
	f.record(ctx, method, req)
	f.mu.Lock()
	fn := f.unary[method]
	f.mu.Unlock()
	if fn == nil {
		return empty, nil
	}
	resp, err := fn(ctx, req)
	if err != nil {
		var zero Resp
		return zero, err
	}
	return resp.(Resp), nil
}

// BusinessError returns the status a Taskmesh service answers for a
// business error: the gRPC code plus an ErrorInfo naming the code.
func BusinessError(c codes.Code, msg string, code taskv1.ErrorCode) error {
	reason := code.String()[len("ERROR_CODE_"):]
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{
		Domain:   "taskmesh",
		Reason:   reason,
		Metadata: map[string]string{"code": strconv.Itoa(int(code))},
	})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
