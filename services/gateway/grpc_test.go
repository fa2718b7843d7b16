package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

// dial connects a client to the gateway's gRPC front door.
func (e *env) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(e.gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// outgoing returns a context carrying the bearer secret and extra pairs.
func outgoing(bearer string, kv ...string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if bearer != "" {
		kv = append(kv, "authorization", "Bearer "+bearer)
	}
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(kv...)), cancel
}

func TestGRPCUnaryThroughProxy(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	e.fake.Handle("GetTask", func(ctx context.Context, req proto.Message) (proto.Message, error) {
		grpc.SetHeader(ctx, metadata.Pairs("x-sched-header", "h1"))
		grpc.SetTrailer(ctx, metadata.Pairs("x-sched-trailer", "t1"))
		return &taskv1.GetTaskResponse{Task: claimedTask()}, nil
	})
	ctx, cancel := outgoing(e.userSecret,
		"x-request-id", "grpc-req-1",
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		// Spoofing attempts and noise that must not pass.
		"x-taskmesh-tenant", "globex", "x-taskmesh-principal-kind", "admin",
		"x-taskmesh-internal-token", "guess", "x-custom", "1", "baggage", "k=v")
	defer cancel()
	var header, trailer metadata.MD
	resp, err := taskv1.NewTaskServiceClient(conn).GetTask(ctx, &taskv1.GetTaskRequest{Id: "task-001"}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(resp.GetTask(), claimedTask()) {
		t.Errorf("task = %v", resp.GetTask())
	}
	if got := header.Get("x-sched-header"); len(got) != 1 || got[0] != "h1" {
		t.Errorf("header = %v", header)
	}
	if got := trailer.Get("x-sched-trailer"); len(got) != 1 || got[0] != "t1" {
		t.Errorf("trailer = %v", trailer)
	}
	c, _ := e.fake.LastCall()
	want := authn.Principal{Kind: authn.KindUser, TenantID: "acme", Subject: e.userKey.ID, RemoteIP: "127.0.0.1", Tier: "premium"}
	if c.Principal != want {
		t.Errorf("principal = %+v, want %+v", c.Principal, want)
	}
	if !proto.Equal(c.Request, &taskv1.GetTaskRequest{Id: "task-001"}) {
		t.Errorf("request = %v", c.Request)
	}
	assertScrubbed(t, c.MD, e.userSecret)
	if got := c.MD.Get("x-request-id"); len(got) != 1 || got[0] != "grpc-req-1" {
		t.Errorf("x-request-id = %v", got)
	}
	if got := c.MD.Get("traceparent"); len(got) != 1 || !strings.HasPrefix(got[0], "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
		t.Errorf("traceparent = %v", got)
	}

	// Agents reach the lease service.
	e.fake.Respond("ClaimTasks", &taskv1.ClaimTasksResponse{Tasks: []*taskv1.Task{claimedTask()}, RequestId: "r1"})
	actx, acancel := outgoing(e.agentSec)
	defer acancel()
	claim, err := taskv1.NewLeaseServiceClient(conn).ClaimTasks(actx, &taskv1.ClaimTasksRequest{AgentId: "agent-001", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(claim.GetTasks()) != 1 || claim.GetRequestId() != "r1" {
		t.Errorf("claim = %v", claim)
	}
	c, _ = e.fake.LastCall()
	if c.Principal.Kind != authn.KindAgent || c.Principal.AgentID != "agent-001" || c.Principal.RemoteIP != "127.0.0.1" {
		t.Errorf("agent principal = %+v", c.Principal)
	}
	if got := c.MD.Get("x-request-id"); len(got) != 1 || len(got[0]) != 36 {
		t.Errorf("x-request-id = %v, want a generated one", got)
	}
}

func TestGRPCServerStreamingThroughProxy(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	e.fake.HandleWatch(func(req *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error {
		stream.SetHeader(metadata.Pairs("x-watch", "on"))
		for _, p := range []int32{0, 50, 100} {
			if err := stream.Send(&taskv1.WatchTaskResponse{Task: &taskv1.Task{Id: req.GetId(), Progress: p}}); err != nil {
				return err
			}
		}
		stream.SetTrailer(metadata.Pairs("x-watch-end", "done"))
		return nil
	})
	ctx, cancel := outgoing(e.userSecret)
	defer cancel()
	stream, err := taskv1.NewTaskServiceClient(conn).WatchTask(ctx, &taskv1.WatchTaskRequest{Id: "task-7"})
	if err != nil {
		t.Fatal(err)
	}
	var got []int32
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.GetTask().GetId() != "task-7" {
			t.Errorf("task id = %q", m.GetTask().GetId())
		}
		got = append(got, m.GetTask().GetProgress())
	}
	if len(got) != 3 || got[0] != 0 || got[1] != 50 || got[2] != 100 {
		t.Errorf("progress = %v, want [0 50 100]", got)
	}
	if h, _ := stream.Header(); len(h.Get("x-watch")) != 1 {
		t.Errorf("header = %v", h)
	}
	if tr := stream.Trailer(); len(tr.Get("x-watch-end")) != 1 {
		t.Errorf("trailer = %v", tr)
	}
	c, _ := e.fake.LastCall()
	if c.Method != "WatchTask" || c.Principal.TenantID != "acme" {
		t.Errorf("call = %+v", c)
	}

	// A stream that fails midway passes the status through.
	e.fake.HandleWatch(func(req *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error {
		stream.Send(&taskv1.WatchTaskResponse{Task: &taskv1.Task{Id: req.GetId()}})
		return schedulertest.BusinessError(codes.NotFound, "task deleted", taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND)
	})
	stream, err = taskv1.NewTaskServiceClient(conn).WatchTask(ctx, &taskv1.WatchTaskRequest{Id: "task-8"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first message: %v", err)
	}
	_, err = stream.Recv()
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "task deleted" {
		t.Errorf("stream error = %v", err)
	}
}

func TestGRPCErrorsPassUnchanged(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	e.fake.Handle("CompleteTask", func(ctx context.Context, _ proto.Message) (proto.Message, error) {
		grpc.SetTrailer(ctx, metadata.Pairs("x-sched-trailer", "t2"))
		return nil, schedulertest.BusinessError(codes.Aborted, "attempt mismatch", taskv1.ErrorCode_ERROR_CODE_ATTEMPT_MISMATCH)
	})
	ctx, cancel := outgoing(e.agentSec)
	defer cancel()
	var trailer metadata.MD
	_, err := taskv1.NewLeaseServiceClient(conn).CompleteTask(ctx, &taskv1.CompleteTaskRequest{TaskId: "t", AgentId: "agent-001", AttemptId: "old"}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.Aborted || st.Message() != "attempt mismatch" {
		t.Fatalf("status = %v", st)
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if info == nil || info.GetDomain() != "taskmesh" || info.GetReason() != "ATTEMPT_MISMATCH" || info.GetMetadata()["code"] != "30001" {
		t.Errorf("ErrorInfo = %v", info)
	}
	if got := trailer.Get("x-sched-trailer"); len(got) != 1 || got[0] != "t2" {
		t.Errorf("trailer = %v", trailer)
	}
}

func TestGRPCAuthRefusals(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	revoked, revokedSecret, err := e.creds.CreateAPIKey(context.Background(), "acme", "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.creds.RevokeAPIKey(context.Background(), "acme", revoked.ID, gateway.SystemActor); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		bearer string
		call   func(ctx context.Context) error
		want   codes.Code
	}{
		{"no token", "", e.getTask(conn), codes.Unauthenticated},
		{"garbage token", "nope", e.getTask(conn), codes.Unauthenticated},
		{"revoked key", revokedSecret, e.getTask(conn), codes.Unauthenticated},
		{"user key on lease service", e.userSecret, e.claim(conn), codes.PermissionDenied},
		{"agent token on task service", e.agentSec, e.getTask(conn), codes.PermissionDenied},
		{"unknown service", e.userSecret, func(ctx context.Context) error {
			return conn.Invoke(ctx, "/taskmesh.billing.v1.BillingService/Charge", &taskv1.GetTaskRequest{}, &taskv1.GetTaskResponse{})
		}, codes.Unimplemented},
		// Without Config.QuotaTarget there is no quota service to reach.
		{"quota service not configured", e.userSecret, func(ctx context.Context) error {
			return conn.Invoke(ctx, "/taskmesh.quota.v1.QuotaService/GetQuota", &taskv1.GetTaskRequest{}, &taskv1.GetTaskResponse{})
		}, codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := outgoing(tt.bearer)
			defer cancel()
			if got := status.Code(tt.call(ctx)); got != tt.want {
				t.Errorf("code = %v, want %v", got, tt.want)
			}
		})
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %d calls, want none", len(calls))
	}
}

func TestGRPCAgentTokenFromForeignAddress(t *testing.T) {
	// Behind a trusted proxy (here: the test client on 127.0.0.1) the
	// agent's address comes from x-forwarded-for, as for REST.
	e := newEnv(t, withTrustedProxies("127.0.0.1/32"))
	conn := e.dial(t)
	call := func(ip string) error {
		ctx, cancel := outgoing(e.agentSec, "x-forwarded-for", ip)
		defer cancel()
		_, err := taskv1.NewLeaseServiceClient(conn).SendHeartbeat(ctx, &taskv1.SendHeartbeatRequest{AgentId: "agent-001"})
		return err
	}
	if err := call("192.0.2.10"); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if c, _ := e.fake.LastCall(); c.Principal.RemoteIP != "192.0.2.10" {
		t.Errorf("remote ip = %q", c.Principal.RemoteIP)
	}
	if got := status.Code(call("192.0.2.11")); got != codes.PermissionDenied {
		t.Errorf("foreign address: %v, want PermissionDenied", got)
	}
	if got := status.Code(call("192.0.2.10")); got != codes.Unauthenticated {
		t.Errorf("after revocation: %v, want Unauthenticated", got)
	}
}

func TestGRPCHealth(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// No credentials needed; the watcher may need a moment after start-up.
	for _, svc := range []string{"", "taskmesh.task.v1.TaskService", "taskmesh.task.v1.LeaseService"} {
		for {
			resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil {
				t.Fatalf("Check(%q): %v", svc, err)
			}
			if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("Check(%q) never SERVING", svc)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

func (e *env) getTask(conn *grpc.ClientConn) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := taskv1.NewTaskServiceClient(conn).GetTask(ctx, &taskv1.GetTaskRequest{Id: "t"})
		return err
	}
}

func (e *env) claim(conn *grpc.ClientConn) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := taskv1.NewLeaseServiceClient(conn).ClaimTasks(ctx, &taskv1.ClaimTasksRequest{AgentId: "agent-001"})
		return err
	}
}

// TestGRPCClientCancelReachesScheduler: a client that abandons a watch
// ends the upstream stream too, so no goroutine or scheduler stream leaks.
func TestGRPCClientCancelReachesScheduler(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	ended := make(chan error, 1)
	e.fake.HandleWatch(func(req *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error {
		if err := stream.Send(&taskv1.WatchTaskResponse{Task: &taskv1.Task{Id: req.GetId()}}); err != nil {
			return err
		}
		<-stream.Context().Done()
		ended <- stream.Context().Err()
		return stream.Context().Err()
	})
	ctx, cancel := outgoing(e.userSecret)
	defer cancel()
	stream, err := taskv1.NewTaskServiceClient(conn).WatchTask(ctx, &taskv1.WatchTaskRequest{Id: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("scheduler stream ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler's stream was not cancelled")
	}
}

// Every answer of the front door carries the call's request id as header
// metadata, as REST answers it as a header: the client's own when it sent
// a valid one, else the one the gateway made; on success and on refusal,
// proxied or served by the gateway itself, unary or streaming.
func TestGRPCRequestIDEchoed(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	admin := e.adminSecret(t)
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	e.fake.HandleWatch(func(req *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error {
		// A service's own id does not reach the client twice.
		stream.SetHeader(metadata.Pairs("x-request-id", "from-the-scheduler"))
		return stream.Send(&taskv1.WatchTaskResponse{Task: &taskv1.Task{Id: req.GetId()}})
	})
	check := func(name string, header metadata.MD, want string) {
		t.Helper()
		got := header.Get("x-request-id")
		switch {
		case want == "" && (len(got) != 1 || len(got[0]) != 36):
			t.Errorf("%s: x-request-id = %v, want one generated id", name, got)
		case want != "" && (len(got) != 1 || got[0] != want):
			t.Errorf("%s: x-request-id = %v, want [%s]", name, got, want)
		}
	}
	unary := []struct {
		name, bearer, id string
		call             func(ctx context.Context, h *metadata.MD) error
		ok               bool
	}{
		{"proxied", e.userSecret, "rid-1", func(ctx context.Context, h *metadata.MD) error {
			_, err := taskv1.NewTaskServiceClient(conn).GetTask(ctx, &taskv1.GetTaskRequest{Id: "t"}, grpc.Header(h))
			return err
		}, true},
		{"proxied, invalid id replaced", e.userSecret, "", func(ctx context.Context, h *metadata.MD) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", "has spaces")
			_, err := taskv1.NewTaskServiceClient(conn).GetTask(ctx, &taskv1.GetTaskRequest{Id: "t"}, grpc.Header(h))
			return err
		}, true},
		{"unauthenticated", "", "rid-2", func(ctx context.Context, h *metadata.MD) error {
			_, err := taskv1.NewTaskServiceClient(conn).GetTask(ctx, &taskv1.GetTaskRequest{Id: "t"}, grpc.Header(h))
			return err
		}, false},
		{"bad input", e.userSecret, "", func(ctx context.Context, h *metadata.MD) error {
			_, err := taskv1.NewTaskServiceClient(conn).GetTask(ctx, &taskv1.GetTaskRequest{Id: "a\x00"}, grpc.Header(h))
			return err
		}, false},
		{"the gateway's own", admin, "rid-3", func(ctx context.Context, h *metadata.MD) error {
			_, err := adminv1.NewAdminServiceClient(conn).ListTenants(ctx, &adminv1.ListTenantsRequest{}, grpc.Header(h))
			return err
		}, true},
		{"the gateway's own, refused", admin, "rid-4", func(ctx context.Context, h *metadata.MD) error {
			_, err := adminv1.NewAdminServiceClient(conn).GetTenant(ctx, &adminv1.GetTenantRequest{TenantId: "nope"}, grpc.Header(h))
			return err
		}, false},
		{"health", "", "rid-5", func(ctx context.Context, h *metadata.MD) error {
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(h))
			return err
		}, true},
	}
	for _, tt := range unary {
		var kv []string
		if tt.id != "" {
			kv = []string{"x-request-id", tt.id}
		}
		ctx, cancel := outgoing(tt.bearer, kv...)
		var header metadata.MD
		err := tt.call(ctx, &header)
		cancel()
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
		check(tt.name, header, tt.id)
	}

	ctx, cancel := outgoing(e.userSecret, "x-request-id", "rid-watch")
	defer cancel()
	stream, err := taskv1.NewTaskServiceClient(conn).WatchTask(ctx, &taskv1.WatchTaskRequest{Id: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	h, _ := stream.Header()
	check("watch", h, "rid-watch")

	rctx, rcancel := outgoing(e.userSecret, "x-request-id", "rid-reflect")
	defer rcancel()
	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Recv(); err != nil {
		t.Fatal(err)
	}
	h, _ = rs.Header()
	check("reflection", h, "rid-reflect")
}

// The front door's own refusals carry the ErrorInfo of the code REST
// answers them with (401, 403, 429), a 429 keeping its RetryInfo.
func TestGRPCRefusalsCarryTheRESTCode(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	e.fake.Respond("GetTask", &taskv1.GetTaskResponse{Task: claimedTask()})
	limited := e.limitedKey(t, "limited", gateway.Limits{RPM: 1}, gateway.Limits{})
	tests := []struct {
		name   string
		bearer string
		call   func(ctx context.Context) error
		code   codes.Code
		want   string
		reason string
	}{
		{"no token", "", e.getTask(conn), codes.Unauthenticated, "401", "UNAUTHENTICATED"},
		{"garbage token", "nope", e.getTask(conn), codes.Unauthenticated, "401", "UNAUTHENTICATED"},
		{"agent token on task service", e.agentSec, e.getTask(conn), codes.PermissionDenied, "403", "PERMISSION_DENIED"},
		{"user key on lease service", e.userSecret, e.claim(conn), codes.PermissionDenied, "403", "PERMISSION_DENIED"},
		{"unknown method", e.userSecret, func(ctx context.Context) error {
			return conn.Invoke(ctx, "/taskmesh.task.v1.TaskService/Nothing", &taskv1.GetTaskRequest{}, &taskv1.GetTaskResponse{})
		}, codes.Unimplemented, "404", "NOT_FOUND"},
		{"first call within the limit", limited, e.getTask(conn), codes.OK, "", ""},
		{"over the rate limit", limited, e.getTask(conn), codes.ResourceExhausted, "429", "RESOURCE_EXHAUSTED"},
	}
	for _, tt := range tests {
		ctx, cancel := outgoing(tt.bearer)
		err := tt.call(ctx)
		cancel()
		st := status.Convert(err)
		if st.Code() != tt.code {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.code)
			continue
		}
		if tt.code == codes.OK {
			continue
		}
		var info *errdetails.ErrorInfo
		var retry *errdetails.RetryInfo
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				info = d
			case *errdetails.RetryInfo:
				retry = d
			}
		}
		if info.GetDomain() != "taskmesh" || info.GetMetadata()["code"] != tt.want || info.GetReason() != tt.reason {
			t.Errorf("%s: ErrorInfo = %v, want code %s, reason %s", tt.name, info, tt.want, tt.reason)
		}
		if tt.code == codes.ResourceExhausted && retry.GetRetryDelay().AsDuration() <= 0 {
			t.Errorf("%s: RetryInfo = %v, want a delay", tt.name, retry)
		}
	}
}

// A request message over the 32 MiB cap is refused by gRPC itself with
// ResourceExhausted and no details: no RetryInfo, which tells it from a
// rate limit a client may retry (docs/api/README.md).
func TestGRPCRequestOverTheSizeLimit(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	ctx, cancel := outgoing(e.userSecret)
	defer cancel()
	_, err := taskv1.NewTaskServiceClient(conn).CreateTask(ctx,
		&taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "n", Command: strings.Repeat("a", grpcserver.MaxRecvMsgBytes+1<<20)}})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), fmt.Sprintf("vs. %d", grpcserver.MaxRecvMsgBytes)) || len(st.Details()) != 0 {
		t.Errorf("33 MiB request: %v %v, want ResourceExhausted without details", err, st.Details())
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %d calls, want none", len(calls))
	}
}

// A method no service has is Unimplemented whoever calls — an operator key
// and an agent token too, which may call only some of the methods that
// exist — while a method that exists is still PermissionDenied to a kind
// that may not call it; the refusal repeats a bounded part of the name.
func TestGRPCUnknownMethodIsUnimplementedForEveryCaller(t *testing.T) {
	e := newEnv(t)
	conn := e.dial(t)
	invoke := func(bearer, method string) error {
		ctx, cancel := outgoing(bearer)
		defer cancel()
		return conn.Invoke(ctx, method, &taskv1.GetTaskRequest{}, &taskv1.GetTaskResponse{})
	}
	admin := e.adminSecret(t)
	callers := map[string]string{"an API key": e.userSecret, "an agent token": e.agentSec, "an operator key": admin}
	for who, bearer := range callers {
		for _, method := range []string{"/taskmesh.billing.v1.BillingService/Charge", "/taskmesh.task.v1.TaskService/Nothing",
			"/taskmesh.task.v1.LeaseService/Steal", "/taskmesh.admin.v1.AdminService/Nothing"} {
			err := invoke(bearer, method)
			if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != "unknown method "+method {
				t.Errorf("%s calling %s: %v, want Unimplemented %q", who, method, err, "unknown method "+method)
			}
		}
	}
	long := "/taskmesh.task.v1.TaskService/" + strings.Repeat("x", 5000)
	if st := status.Convert(invoke(e.userSecret, long)); st.Code() != codes.Unimplemented || st.Message() != "unknown method "+long[:256] {
		t.Errorf("a 5,000-byte name: %v %d bytes, want Unimplemented with its first 256 bytes", st.Code(), len(st.Message()))
	}
	for _, tt := range []struct{ who, bearer, method string }{
		{"an operator key", admin, "/taskmesh.task.v1.TaskService/GetTask"},
		{"an agent token", e.agentSec, "/taskmesh.task.v1.TaskService/GetTask"},
		{"an API key", e.userSecret, "/taskmesh.task.v1.LeaseService/ClaimTasks"},
		{"an API key", e.userSecret, "/taskmesh.task.v1.AgentFleetService/ListFleetAgents"},
	} {
		if err := invoke(tt.bearer, tt.method); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s calling %s: %v, want PermissionDenied", tt.who, tt.method, err)
		}
	}
	if err := invoke("", "/taskmesh.task.v1.TaskService/Nothing"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no credential: %v, want Unauthenticated", err)
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("the scheduler got %d calls, want none", len(calls))
	}
}
