package gateway_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/gateway"
)

// fakeAdmission is a quota service answering ListClusterQueues and
// recording who asked.
type fakeAdmission struct {
	quotav1.UnimplementedAdmissionServiceServer
	mu     sync.Mutex
	caller authn.Principal
}

func (f *fakeAdmission) ListClusterQueues(ctx context.Context, _ *quotav1.ListClusterQueuesRequest) (*quotav1.ListClusterQueuesResponse, error) {
	p, _ := authn.FromContext(ctx)
	f.mu.Lock()
	f.caller = p
	f.mu.Unlock()
	return &quotav1.ListClusterQueuesResponse{ClusterQueues: []*quotav1.ClusterQueue{{Name: "tenant-high-priority-queue", Origin: "config",
		AdmittedWorkloads: 2}}}, nil
}

func (f *fakeAdmission) ResolveQueue(context.Context, *quotav1.ResolveQueueRequest) (*quotav1.ResolveQueueResponse, error) {
	return &quotav1.ResolveQueueResponse{ClusterQueue: "should-not-be-reached"}, nil
}

func startFakeAdmission(t *testing.T) (*fakeAdmission, string) {
	t.Helper()
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: internalToken})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAdmission{}
	quotav1.RegisterAdmissionServiceServer(srv, f)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f, lis.Addr().String()
}

func TestQuotaRoutes(t *testing.T) {
	f, addr := startFakeAdmission(t)
	e := newEnv(t, func(c *gateway.Config) { c.QuotaTarget = addr })

	r := e.do(t, "GET", "/api/v1/cluster-queues", e.userSecret, "")
	body := r.json(t)
	qs, _ := body["cluster_queues"].([]any)
	if r.status != 200 || len(qs) != 1 || qs[0].(map[string]any)["admitted_workloads"] != float64(2) {
		t.Fatalf("REST list = %d %s", r.status, r.body)
	}
	f.mu.Lock()
	if f.caller.Kind != authn.KindUser || f.caller.TenantID != "acme" || f.caller.Tier != "premium" {
		t.Errorf("quota service saw %+v", f.caller)
	}
	f.mu.Unlock()
	if r := e.do(t, "GET", "/api/v1/cluster-queues", e.agentSec, ""); r.status != 403 {
		t.Errorf("agent token on a quota route: %d", r.status)
	}

	conn := e.dial(t)
	ctx, cancel := outgoing(e.userSecret)
	defer cancel()
	list, err := quotav1.NewAdmissionServiceClient(conn).ListClusterQueues(ctx, &quotav1.ListClusterQueuesRequest{})
	if err != nil || len(list.GetClusterQueues()) != 1 {
		t.Fatalf("gRPC list = %v, %v", list, err)
	}
	// ResolveQueue is the scheduler's, not the public's.
	if _, err := quotav1.NewAdmissionServiceClient(conn).ResolveQueue(ctx, &quotav1.ResolveQueueRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ResolveQueue through the front door: %v", err)
	}
}

func TestQuotaRoutesWithoutQuotaService(t *testing.T) {
	e := newEnv(t)
	if r := e.do(t, "GET", "/api/v1/cluster-queues", e.userSecret, ""); r.status != 404 {
		t.Fatalf("REST without a quota service: %d %s", r.status, r.body)
	}
	ctx, cancel := outgoing(e.userSecret)
	defer cancel()
	_, err := quotav1.NewAdmissionServiceClient(e.dial(t)).ListClusterQueues(ctx, &quotav1.ListClusterQueuesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("gRPC without a quota service: %v", err)
	}
}

// An invalid quota target fails at New (nothing is left open).
func TestInvalidQuotaTarget(t *testing.T) {
	e := newEnv(t)
	_, err := gateway.New(context.Background(), gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		SchedulerTarget: "127.0.0.1:1", QuotaTarget: "bad target \x00", InternalToken: internalToken, DB: e.db})
	if err == nil {
		t.Fatal("gateway.New accepted an invalid quota target")
	}
}
