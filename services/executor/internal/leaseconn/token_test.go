package leaseconn

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A rotated token written to the agent's token file is picked up on the
// next refused call, which is retried once with it: the agent keeps
// running through a rotation.
func TestFileTokenIsRereadAfterARefusal(t *testing.T) {
	var accepted atomic.Value
	accepted.Store("Bearer old")
	var calls atomic.Int32
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		md, _ := metadata.FromIncomingContext(ctx)
		if got := md.Get("authorization"); len(got) != 1 || got[0] != accepted.Load().(string) {
			return nil, status.Error(codes.Unauthenticated, "invalid agent token")
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	file := filepath.Join(t.TempDir(), "agent-token")
	if err := os.WriteFile(file, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := FileToken(file)
	if err != nil {
		t.Fatal(err)
	}
	tok.minAgain = 0 // reread at every refusal in this test
	conn, err := Dial(lis.Addr().String(), tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func() error {
		_, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(); err != nil {
		t.Fatalf("with the first token: %v", err)
	}
	// The operator rotates: the server takes only the new secret, which
	// is written to the file.
	accepted.Store("Bearer new")
	if err := os.WriteFile(file, []byte("new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := calls.Load()
	if err := check(); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
	if n := calls.Load() - before; n != 2 {
		t.Errorf("%d calls after the rotation, want 2 (refused, retried)", n)
	}
	if tok.Secret() != "new" {
		t.Errorf("secret = %q", tok.Secret())
	}
	// Refused with nothing new in the file: one call, the refusal stands.
	accepted.Store("Bearer other")
	before = calls.Load()
	if err := check(); status.Code(err) != codes.Unauthenticated || calls.Load()-before != 1 {
		t.Errorf("refused without a new token: %v after %d calls", err, calls.Load()-before)
	}
	if _, err := FileToken(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing token file was accepted")
	}
}
