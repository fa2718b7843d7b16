package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/freeport"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/gateway/internal/schedulertest"
)

// waitNoGatewayConnections waits until the server has seen the sessions of
// the gateway's own pool on db go away.
func waitNoGatewayConnections(t *testing.T, db *pgtest.DB) {
	t.Helper()
	admin := db.Open(t, "public")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		err := admin.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'taskmesh-gateway'`, db.Name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's pool still holds %d connections", n)
		}
	}
}

// The process form: Run opens its own pool on DatabaseURL, writes an
// operator key that works, serves until ctx ends, and releases the pool.
func TestRunOpensItsDatabaseAndBootstrapsTheOperatorKey(t *testing.T) {
	db := pgtest.New(t)
	fake := schedulertest.Start(t, internalToken)
	keyFile := filepath.Join(t.TempDir(), "admin-key")
	httpAddr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- gateway.Run(ctx, gateway.Config{HTTPAddr: httpAddr, GRPCAddr: "127.0.0.1:0", SchedulerTarget: fake.Addr,
			InternalToken: internalToken, DatabaseURL: db.URL, AdminKeyFile: keyFile, Logger: slog.New(slog.DiscardHandler)})
	}()
	var key []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if key, err = os.ReadFile(keyFile); err == nil && len(key) > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no operator key was written")
		}
	}
	var status int
	for deadline := time.Now().Add(30 * time.Second); status != http.StatusOK; time.Sleep(20 * time.Millisecond) {
		req, _ := http.NewRequest("GET", "http://"+httpAddr+"/api/v1/admin/tenants", nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin API answered %d to the operator key", status)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil after ctx ended", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	waitNoGatewayConnections(t, db)
}

// A New that fails part way releases what it had opened: the HTTP listener
// it had bound and the pool it had opened.
func TestNewReleasesWhatItOpenedWhenItFails(t *testing.T) {
	db := pgtest.New(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := free.Addr().String()
	free.Close()
	g, err := gateway.New(context.Background(), gateway.Config{HTTPAddr: httpAddr, GRPCAddr: busy.Addr().String(),
		SchedulerTarget: "127.0.0.1:1", InternalToken: internalToken, DatabaseURL: db.URL})
	if err == nil {
		g.Close()
		t.Fatal("New succeeded on a busy gRPC port")
	}
	if !strings.Contains(err.Error(), "listen grpc") {
		t.Fatalf("New = %v, want the listen error", err)
	}
	again, err := net.Listen("tcp", httpAddr)
	if err != nil {
		t.Fatalf("the HTTP address %s is still held after New failed: %v", httpAddr, err)
	}
	again.Close()
	waitNoGatewayConnections(t, db)
}

// Run hands New's errors back, and a bad operator key file stops it
// before it serves.
func TestRunReportsStartErrors(t *testing.T) {
	db := pgtest.New(t)
	if err := gateway.Run(context.Background(), gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		SchedulerTarget: "127.0.0.1:1", InternalToken: internalToken}); err == nil || !strings.Contains(err.Error(), "DatabaseURL") {
		t.Errorf("Run without a database = %v", err)
	}
	dir := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := gateway.Run(context.Background(), gateway.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		SchedulerTarget: "127.0.0.1:1", InternalToken: internalToken, DatabaseURL: db.URL,
		AdminKeyFile: filepath.Join(dir, "admin-key")})
	if err == nil || !strings.Contains(err.Error(), "admin key file") {
		t.Errorf("Run with an unwritable key file = %v", err)
	}
	var pathErr *os.PathError
	if !errors.As(err, &pathErr) {
		t.Errorf("Run error %v does not carry the file error", err)
	}
	waitNoGatewayConnections(t, db)
}
