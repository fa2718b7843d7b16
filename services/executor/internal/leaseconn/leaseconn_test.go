package leaseconn

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// frontDoor is a gRPC server counting the calls it serves.
type frontDoor struct {
	srv   *grpc.Server
	addr  string
	calls atomic.Int32
}

func newFrontDoor(t *testing.T) *frontDoor {
	t.Helper()
	f := &frontDoor{}
	f.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		f.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(f.srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	go f.srv.Serve(lis)
	t.Cleanup(f.srv.Stop)
	return f
}

// An agent given several front doors uses the first that answers and,
// when it goes away, the next: one gateway down does not cut the agent
// off.
func TestSeveralFrontDoorsFailOver(t *testing.T) {
	down := newFrontDoor(t)
	down.srv.Stop() // nothing listens there any more
	first, second := newFrontDoor(t), newFrontDoor(t)
	conn, err := Dial(strings.Join([]string{down.addr, first.addr, " " + second.addr}, ","), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Until it succeeds: the way an agent's heartbeats and claims go on.
	call := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no front door answered: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	call()
	if first.calls.Load() != 1 || second.calls.Load() != 0 {
		t.Fatalf("calls: first %d, second %d; want the first answering door", first.calls.Load(), second.calls.Load())
	}
	first.srv.Stop()
	call()
	if second.calls.Load() != 1 {
		t.Fatalf("calls to the second door after the first went away: %d", second.calls.Load())
	}
}

func TestFrontDoorListsAreHostPorts(t *testing.T) {
	for _, bad := range []string{"127.0.0.1:1,", "127.0.0.1:1,nohost", "127.0.0.1:1,:9090"} {
		if _, err := Dial(bad, nil, nil); err == nil || !strings.Contains(err.Error(), "want host:port") {
			t.Errorf("Dial(%q) = %v, want a host:port error", bad, err)
		}
	}
}
