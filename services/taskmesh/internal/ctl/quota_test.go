package ctl

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/quota"
)

// quotaServer runs a quota service and returns its address and a file
// holding its internal token.
func quotaServer(t *testing.T) (addr, tokenFile string) {
	t.Helper()
	pool, err := pg.Open(context.Background(), pg.Config{URL: pgtest.New(t).URL, Schema: quota.Schema, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	svc, err := quota.New(quota.Config{DB: pool, Kafka: kafkatest.New(t).Config(), Partitions: 1,
		OperatorDelay: 10 * time.Millisecond, PassInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: "ctl-quota-token"})
	if err != nil {
		t.Fatal(err)
	}
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis) }()
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); srv.Stop(); <-done })
	tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("ctl-quota-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return lis.Addr().String(), tokenFile
}

func TestQuotaCommands(t *testing.T) {
	addr, tokenFile := quotaServer(t)
	a := testApp(EnvQuotaServer, addr, EnvInternalTokenFile, tokenFile)
	must := func(args ...string) string {
		t.Helper()
		r := a.run(t, "", append([]string{"quota"}, args...)...)
		if r.code != 0 {
			t.Fatalf("ctl quota %v: exit %d: %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	must("tenants", "register", "acme", "Acme")
	must("clusters", "create", "c1", "--description", "test cluster")
	if out := must("inventory", "set", "c1", "A100", "8"); !strings.Contains(out, "A100") {
		t.Fatalf("inventory set printed %q", out)
	}
	out := must("create", "--tenant", "acme", "--cluster", "c1", "--kind", "GU", "--name", "gu1", "--min", "2", "--max", "4",
		"--machine-type", "A100")
	if !strings.Contains(out, "gu1-default") || !strings.Contains(out, "gu1-background (background)") {
		t.Fatalf("create printed:\n%s", out)
	}
	id := strings.Fields(lines(out)[1])[0]
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(lines(must("get", id))[1], "Active") { // the root's row
		if time.Now().After(deadline) {
			t.Fatalf("quota never became Active:\n%s", must("get", id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out := must("check", "acme", "gu1"); !strings.Contains(out, "Running") {
		t.Fatalf("check printed:\n%s", out)
	}
	if out := must("inventory", "get", "c1", "-o", "json"); !strings.Contains(out, `"allocated_gpus": 2`) {
		t.Fatalf("inventory json:\n%s", out)
	}
	if out := must("workgroups"); len(lines(out)) != 2 {
		t.Fatalf("workgroups:\n%s", out)
	}

	// Errors: a check of a missing quota, a bad count, no token.
	if r := a.run(t, "", "quota", "check", "acme", "nope"); r.code != 1 || !strings.Contains(r.stderr, "code 30010 gu quota not exists") {
		t.Fatalf("check nope: %d %s", r.code, r.stderr)
	}
	if r := a.run(t, "", "quota", "inventory", "set", "c1", "A100", "many"); r.code != 2 {
		t.Fatalf("bad count: %d %s", r.code, r.stderr)
	}
	if r := testApp(EnvQuotaServer, addr).run(t, "", "quota", "list"); r.code != 2 || !strings.Contains(r.stderr, "internal token") {
		t.Fatalf("no token: %d %s", r.code, r.stderr)
	}
	must("delete", id)
}
