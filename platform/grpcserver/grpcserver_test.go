package grpcserver

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// fakeTasks records whether its handler ran.
type fakeTasks struct {
	taskv1.UnimplementedTaskServiceServer
	calls atomic.Int64
	panic bool
}

func (f *fakeTasks) GetTask(ctx context.Context, r *taskv1.GetTaskRequest) (*taskv1.GetTaskResponse, error) {
	f.calls.Add(1)
	if f.panic {
		panic("boom")
	}
	p, _ := authn.FromContext(ctx)
	return &taskv1.GetTaskResponse{Task: &taskv1.Task{Id: r.GetId(), Name: p.TenantID}}, nil
}

func start(t *testing.T, f *fakeTasks) *grpc.ClientConn {
	t.Helper()
	s, err := New(Options{InternalToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	taskv1.RegisterTaskServiceServer(s, f)
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

func asUser() context.Context {
	return authn.Outgoing(context.Background(), authn.Principal{Kind: authn.KindUser, TenantID: "t1", Subject: "k"}, "tok")
}

func detail(err error) (code string, fields []*errdetails.BadRequest_FieldViolation) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.ErrorInfo:
			code = v.GetMetadata()["code"]
		case *errdetails.BadRequest:
			fields = v.GetFieldViolations()
		}
	}
	return code, fields
}

func TestValidationRefusesBeforeTheHandler(t *testing.T) {
	f := &fakeTasks{}
	c := taskv1.NewTaskServiceClient(start(t, f))
	_, err := c.GetTask(asUser(), &taskv1.GetTaskRequest{Id: ""})
	code, fields := detail(err)
	if status.Code(err) != codes.InvalidArgument || code != "30005" || len(fields) != 1 || fields[0].GetField() != "id" {
		t.Fatalf("err = %v (code %s, fields %v)", err, code, fields)
	}
	if f.calls.Load() != 0 {
		t.Fatal("the handler ran for an invalid request")
	}
	resp, err := c.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "x"})
	if err != nil || resp.GetTask().GetName() != "t1" {
		t.Fatalf("valid request: %v, %v", resp, err)
	}
}

func TestPanicBecomesInternal(t *testing.T) {
	c := taskv1.NewTaskServiceClient(start(t, &fakeTasks{panic: true}))
	_, err := c.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "x"})
	if code, _ := detail(err); status.Code(err) != codes.Internal || code != "30099" || status.Convert(err).Message() != "internal error" {
		t.Fatalf("err = %v", err)
	}
	// The server survived.
	if _, err := c.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "y"}); status.Code(err) != codes.Internal {
		t.Fatalf("second call: %v", err)
	}
}

func TestInternalTokenRequiredButNotForHealth(t *testing.T) {
	conn := start(t, &fakeTasks{})
	_, err := taskv1.NewTaskServiceClient(conn).GetTask(context.Background(), &taskv1.GetTaskRequest{Id: "x"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", resp, err)
	}
}

func TestCodeReadsWhatStatusWrites(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{Status(codes.Aborted, 30001, "ATTEMPT_MISMATCH", "attempt mismatch"), 30001},
		{status.Error(codes.NotFound, "plain"), 0},
		{context.Canceled, 0},
	}
	for _, tt := range tests {
		if got := Code(tt.err); got != tt.want {
			t.Errorf("Code(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// blockingTasks holds GetTask until its context ends or release is closed.
type blockingTasks struct {
	taskv1.UnimplementedTaskServiceServer
	entered chan struct{}
	release chan struct{}
}

func newBlockingTasks() *blockingTasks {
	return &blockingTasks{entered: make(chan struct{}, 8), release: make(chan struct{})}
}

func (b *blockingTasks) GetTask(ctx context.Context, r *taskv1.GetTaskRequest) (*taskv1.GetTaskResponse, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
		return &taskv1.GetTaskResponse{Task: &taskv1.Task{Id: r.GetId()}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serveBlocking runs Run with a blocking TaskService and work that waits
// for its context; it returns the client, the handler, and channels that
// report Run's result and the moment work's context ended.
func serveBlocking(t *testing.T, grace time.Duration, work func(context.Context) error) (
	taskv1.TaskServiceClient, *blockingTasks, context.CancelFunc, string, <-chan error) {
	t.Helper()
	srv, err := New(Options{InternalToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	tasks := newBlockingTasks()
	taskv1.RegisterTaskServiceServer(srv, tasks)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, srv.Server, lis, grace, work) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return taskv1.NewTaskServiceClient(conn), tasks, cancel, lis.Addr().String(), done
}

// waitResult waits for Run to return.
func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// A call in flight when ctx ends finishes during the grace, while the
// service's work still runs; only then does work's context end.
func TestRunLetsCallsInFlightFinishBeforeStoppingWork(t *testing.T) {
	workStopped := make(chan struct{})
	client, tasks, cancel, addr, done := serveBlocking(t, time.Minute, func(ctx context.Context) error {
		<-ctx.Done()
		close(workStopped)
		return nil
	})
	call := make(chan error, 1)
	go func() {
		_, err := client.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "in-flight"})
		call <- err
	}()
	<-tasks.entered
	cancel()
	// The listener closes when the graceful stop begins.
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-workStopped:
		t.Fatal("work was stopped while a call was still in flight")
	default:
	}
	close(tasks.release)
	if err := <-call; err != nil {
		t.Errorf("in-flight call: %v, want it to finish", err)
	}
	if err := waitResult(t, done); err != nil {
		t.Errorf("Run = %v, want nil after ctx ended", err)
	}
	select {
	case <-workStopped:
	default:
		t.Error("Run returned before work's context ended")
	}
}

// A call that outlasts the grace is cut, and Run returns.
func TestRunCutsCallsAfterTheGrace(t *testing.T) {
	client, tasks, cancel, _, done := serveBlocking(t, 50*time.Millisecond, func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	})
	call := make(chan error, 1)
	go func() {
		_, err := client.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "long-poll"})
		call <- err
	}()
	<-tasks.entered
	cancel()
	if err := waitResult(t, done); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if err := <-call; status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Errorf("cut call: %v, want Unavailable or Canceled", err)
	}
}

// Work that fails stops the server, and its error is Run's.
func TestRunReturnsTheErrorOfWorkAndStopsServing(t *testing.T) {
	failure := errors.New("relay broke")
	fail := make(chan struct{})
	client, tasks, _, addr, done := serveBlocking(t, time.Minute, func(ctx context.Context) error {
		<-fail
		return failure
	})
	close(tasks.release)
	if _, err := client.GetTask(asUser(), &taskv1.GetTaskRequest{Id: "x"}); err != nil {
		t.Fatalf("serving before the failure: %v", err)
	}
	close(fail)
	if err := waitResult(t, done); !errors.Is(err, failure) {
		t.Fatalf("Run = %v, want the work's error", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the listener still accepts after Run returned")
	}
}

// A server that stops serving (its listener closed under it) ends work
// and Run with an error naming the address.
func TestServeReportsAnEarlyEnd(t *testing.T) {
	srv, err := New(Options{InternalToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	workErr := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), srv.Server, lis, time.Second, func(ctx context.Context) error {
			<-ctx.Done()
			workErr <- ctx.Err()
			return nil
		})
	}()
	// Wait until it serves, then pull the listener away.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	lis.Close()
	err = waitResult(t, done)
	if err == nil || !strings.Contains(err.Error(), lis.Addr().String()) {
		t.Fatalf("Run = %v, want an error naming %s", err, lis.Addr())
	}
	if got := <-workErr; !errors.Is(got, context.Canceled) {
		t.Errorf("work's context ended with %v", got)
	}
}
