package grpcserver

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// transports builds the same TaskService behind a real server and behind
// a Local, so each behaviour is checked to be the same on both.
var transports = []struct {
	name  string
	serve func(t *testing.T, srv taskv1.TaskServiceServer) grpc.ClientConnInterface
}{
	{"tcp", func(t *testing.T, srv taskv1.TaskServiceServer) grpc.ClientConnInterface {
		t.Helper()
		s, err := New(Options{InternalToken: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		taskv1.RegisterTaskServiceServer(s, srv)
		return serve(t, s)
	}},
	{"local", func(t *testing.T, srv taskv1.TaskServiceServer) grpc.ClientConnInterface {
		t.Helper()
		l, err := NewLocal(Options{InternalToken: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		taskv1.RegisterTaskServiceServer(l, srv)
		return l
	}},
}

// serve serves s on a loopback port until the test ends.
func serve(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// refusing reports whether Stop has begun.
func (l *Local) refusing() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.stopped
}

// probeTasks answers GetTask with what its handler saw, and fails the way
// the request's id asks.
type probeTasks struct {
	taskv1.UnimplementedTaskServiceServer
}

type ctxKey struct{}

func (probeTasks) GetTask(ctx context.Context, r *taskv1.GetTaskRequest) (*taskv1.GetTaskResponse, error) {
	switch r.GetId() {
	case "plain-error":
		return nil, errors.New("plain failure")
	case "deadline":
		return nil, context.DeadlineExceeded
	case "panic":
		panic("boom")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-header", "h"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
	p, _ := authn.FromContext(ctx)
	_, outgoing := metadata.FromOutgoingContext(ctx)
	leaked, _ := ctx.Value(ctxKey{}).(string)
	// Name: the principal's tenant; Command: whether the caller's outgoing
	// metadata or context values reached the handler.
	return &taskv1.GetTaskResponse{Task: &taskv1.Task{Id: r.GetId(), Name: p.TenantID,
		Command: map[bool]string{true: "leaked", false: "clean"}[outgoing || leaked != ""]}}, nil
}

func TestLocalBehavesLikeTheServer(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			c := taskv1.NewTaskServiceClient(tr.serve(t, probeTasks{}))
			ctx := context.WithValue(asUser(), ctxKey{}, "secret")
			var header, trailer metadata.MD
			resp, err := c.GetTask(ctx, &taskv1.GetTaskRequest{Id: "x"}, grpc.Header(&header), grpc.Trailer(&trailer))
			if err != nil || resp.GetTask().GetName() != "t1" || resp.GetTask().GetCommand() != "clean" {
				t.Fatalf("GetTask = %v, %v; want the principal's tenant and nothing of the caller's context", resp, err)
			}
			if header.Get("x-header")[0] != "h" || trailer.Get("x-trailer")[0] != "t" {
				t.Errorf("header %v, trailer %v", header, trailer)
			}
			tests := []struct {
				ctx  context.Context
				id   string
				want codes.Code
				code string // business code in ErrorInfo
			}{
				{asUser(), "", codes.InvalidArgument, "30005"},
				{context.Background(), "x", codes.Unauthenticated, ""},
				{asUser(), "panic", codes.Internal, "30099"},
				{asUser(), "plain-error", codes.Unknown, ""},
				{asUser(), "deadline", codes.DeadlineExceeded, ""},
			}
			for _, tt := range tests {
				_, err := c.GetTask(tt.ctx, &taskv1.GetTaskRequest{Id: tt.id})
				if code, _ := detail(err); status.Code(err) != tt.want || code != tt.code {
					t.Errorf("GetTask(%q) = %v (code %q), want %v (code %q)", tt.id, err, code, tt.want, tt.code)
				}
			}
			if _, err := c.ListTasks(asUser(), &taskv1.ListTasksRequest{}); status.Code(err) != codes.Unimplemented {
				t.Errorf("unimplemented method: %v", err)
			}
		})
	}
}

func TestLocalCallerCancelsTheHandler(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			tasks := newBlockingTasks()
			c := taskv1.NewTaskServiceClient(tr.serve(t, tasks))
			ctx, cancel := context.WithCancel(asUser())
			errc := make(chan error, 1)
			go func() {
				_, err := c.GetTask(ctx, &taskv1.GetTaskRequest{Id: "x"})
				errc <- err
			}()
			<-tasks.entered
			cancel()
			if err := <-errc; status.Code(err) != codes.Canceled {
				t.Fatalf("err = %v, want Canceled", err)
			}
		})
	}
}

func TestLocalStopRefusesNewCallsAfterTheOnesInFlight(t *testing.T) {
	l, err := NewLocal(Options{InternalToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	tasks := newBlockingTasks()
	taskv1.RegisterTaskServiceServer(l, tasks)
	c := taskv1.NewTaskServiceClient(l)
	errc := make(chan error, 1)
	go func() {
		_, err := c.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "x"})
		errc <- err
	}()
	<-tasks.entered
	stopped := make(chan struct{})
	go func() { l.Stop(time.Minute); close(stopped) }()
	// Stop waits for the call in flight; new calls are refused meanwhile.
	for !l.refusing() {
		time.Sleep(time.Millisecond)
	}
	if _, err := c.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "y"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call after Stop: %v, want Unavailable", err)
	}
	select {
	case <-stopped:
		t.Fatal("Stop returned while a call was in flight")
	default:
	}
	close(tasks.release)
	if err := <-errc; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	<-stopped
}

func TestLocalStopCutsCallsAfterTheGrace(t *testing.T) {
	l, err := NewLocal(Options{InternalToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	tasks := newBlockingTasks()
	taskv1.RegisterTaskServiceServer(l, tasks)
	errc := make(chan error, 1)
	go func() {
		_, err := taskv1.NewTaskServiceClient(l).GetTask(asUser(), &taskv1.GetTaskRequest{Id: "x"})
		errc <- err
	}()
	<-tasks.entered
	l.Stop(time.Millisecond)
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("the call cut by Stop: %v, want Canceled", err)
	}
}

func TestLocalServesNoStreams(t *testing.T) {
	l, err := NewLocal(Options{InternalToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	taskv1.RegisterTaskServiceServer(l, probeTasks{})
	stream, err := taskv1.NewTaskServiceClient(l).WatchTask(asUser(), &taskv1.WatchTaskRequest{Id: "x"})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("WatchTask = %v, %v; want Unimplemented", stream, err)
	}
}

// Authorize runs after authentication and before validation, on both
// transports: a caller it refuses learns that whatever its request holds,
// and the handler never runs.
func TestAuthorizeComesBeforeValidation(t *testing.T) {
	refuse := func(ctx context.Context, method string) error {
		if p, _ := authn.FromContext(ctx); method == taskv1.TaskService_GetTask_FullMethodName && p.TenantID == "t1" {
			return status.Error(codes.PermissionDenied, "not for t1")
		}
		return nil
	}
	o := Options{InternalToken: "tok", Authorize: refuse}
	servers := map[string]func(f *fakeTasks) grpc.ClientConnInterface{
		"tcp": func(f *fakeTasks) grpc.ClientConnInterface {
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			taskv1.RegisterTaskServiceServer(s, f)
			return serve(t, s)
		},
		"local": func(f *fakeTasks) grpc.ClientConnInterface {
			l, err := NewLocal(o)
			if err != nil {
				t.Fatal(err)
			}
			taskv1.RegisterTaskServiceServer(l, f)
			return l
		},
	}
	for name, open := range servers {
		t.Run(name, func(t *testing.T) {
			f := &fakeTasks{}
			c := taskv1.NewTaskServiceClient(open(f))
			for _, id := range []string{"", "x"} { // invalid, then valid
				if _, err := c.GetTask(asUser(), &taskv1.GetTaskRequest{Id: id}); status.Code(err) != codes.PermissionDenied {
					t.Errorf("GetTask(%q) by t1 = %v, want PermissionDenied", id, err)
				}
			}
			if _, err := c.GetTask(context.Background(), &taskv1.GetTaskRequest{Id: "x"}); status.Code(err) != codes.Unauthenticated {
				t.Errorf("unauthenticated GetTask = %v, want Unauthenticated first", err)
			}
			other := authn.Outgoing(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "t2", Subject: "k"}, "tok")
			if _, err := c.GetTask(other, &taskv1.GetTaskRequest{Id: ""}); status.Code(err) != codes.InvalidArgument {
				t.Errorf("GetTask(\"\") by t2 = %v, want InvalidArgument", err)
			}
			if n := f.calls.Load(); n != 0 {
				t.Errorf("the handler ran %d times", n)
			}
		})
	}
}

// keptTasks answers GetTask with the same message every time, and keeps it.
type keptTasks struct {
	taskv1.UnimplementedTaskServiceServer
	answer *taskv1.GetTaskResponse
}

func (k keptTasks) GetTask(context.Context, *taskv1.GetTaskRequest) (*taskv1.GetTaskResponse, error) {
	return k.answer, nil
}

// An in-process caller gets the handler's answer itself, its fields not
// copied; what it then does to its reply stays its own business as the
// handler gave the answer up. Over the network it gets a copy, equal.
func TestLocalHandsTheAnswerOver(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			task := &taskv1.Task{Id: "t-1", Name: "kept", Env: map[string]string{"a": "b"}}
			c := taskv1.NewTaskServiceClient(tr.serve(t, keptTasks{answer: &taskv1.GetTaskResponse{Task: task}}))
			resp, err := c.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "t-1"})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(resp.GetTask(), task) {
				t.Fatalf("answer %v, want %v", resp.GetTask(), task)
			}
			if handed := resp.GetTask() == task; handed != (tr.name == "local") {
				t.Errorf("the reply holds the handler's own task: %v, want %v", handed, tr.name == "local")
			}
		})
	}
}

// An answer of another type than the reply is copied through the wire
// format, unknown fields and all, and shares nothing with the reply.
func TestHandOverOfAnotherTypeCopies(t *testing.T) {
	answer := &taskv1.GetTaskResponse{Task: &taskv1.Task{Id: "t-1"}}
	answer.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	var out taskv1.CreateTaskResponse
	if err := handOver(answer, &out); err != nil {
		t.Fatal(err)
	}
	if out.GetTask().GetId() != "t-1" || out.GetTask() == answer.GetTask() {
		t.Errorf("reply %v: want a copy of the answer's task", &out)
	}
	if len(out.ProtoReflect().GetUnknown()) == 0 {
		t.Error("the answer's unknown field was lost")
	}
	same := &taskv1.GetTaskResponse{}
	if err := handOver(answer, same); err != nil {
		t.Fatal(err)
	}
	if same.GetTask() != answer.GetTask() || len(same.ProtoReflect().GetUnknown()) == 0 {
		t.Errorf("reply of the answer's type %v: want its task and unknown field handed over", same)
	}
}
