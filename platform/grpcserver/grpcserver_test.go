package grpcserver

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

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
