package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/quota"
)

// startQuota runs `taskmesh quota` and returns its process and output.
func startQuota(t *testing.T, args ...string) (*exec.Cmd, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"quota"}, args...)...)
	cmd.Env = append(os.Environ(), "TASKMESH_TEST_AS_BINARY=1")
	out := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

// A `taskmesh quota` process SIGKILLed in the middle of a production (the
// WorkGroup applied, not yet running) is started again on the same
// database: the production completes, and nothing was recorded twice.
func TestQuotaProcessKilledMidProductionResumes(t *testing.T) {
	db := pgtest.New(t)
	broker := kafkatest.New(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("quota-test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := func(delay string) []string {
		return []string{"--database-url", db.URL, "--kafka-brokers", strings.Join(broker.Addrs(), ","),
			"--internal-token-file", tokenFile, "--listen", addr, "--operator-delay", delay, "--pass-interval", "50ms"}
	}
	first, out := startQuota(t, args("1h")...) // the WorkGroup never runs under this one

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := quotav1.NewQuotaServiceClient(conn)
	ctx := authn.Outgoing(context.Background(), authn.Principal{Kind: authn.KindAdmin, Subject: "ops"}, "quota-test-token")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.RegisterTenant(ctx, &quotav1.RegisterTenantRequest{TenantId: "acme", Name: "Acme"}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("taskmesh quota did not serve:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := c.CreateCluster(ctx, &quotav1.CreateClusterRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetInventory(ctx, &quotav1.SetInventoryRequest{Cluster: "c1", MachineType: "A100", TotalGpus: 8}); err != nil {
		t.Fatal(err)
	}
	created, err := c.CreateQuota(ctx, &quotav1.CreateQuotaRequest{TenantId: "acme", Cluster: "c1", Kind: "GU",
		Spec: &quotav1.QuotaSpec{Name: "gu1", MinUnits: 4, MaxUnits: 8, MachineType: "A100"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetQuota().GetId()

	pool, err := pg.Open(context.Background(), pg.Config{URL: db.URL, Schema: quota.Schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	count := func(typ string) int {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE event_type = $1`, typ).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for count("WorkGroupApplied") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the WorkGroup was never applied:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = first.Process.Signal(syscall.SIGKILL)
	_ = first.Wait()

	// The second process also serves its metrics on their own address.
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, out = startQuota(t, append(args("200ms"), "--metrics-addr", metricsAddr)...)
	for {
		got, err := c.GetQuota(ctx, &quotav1.GetQuotaRequest{QuotaId: id})
		if err == nil && got.GetQuota().GetStatus() == "Active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the production did not resume (%v, %v):\n%s", got, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for typ, want := range map[string]int{"QuotaCreated": 3, "RayClusterProvisioning": 1, "WorkGroupProvisioning": 1,
		"WorkGroupApplied": 1, "WorkGroupRunning": 1, "QuotaProduced": 2, "InventoryReserved": 1} {
		if n := count(typ); n != want {
			t.Errorf("%s recorded %d times, want %d", typ, n, want)
		}
	}
	metrics := scrapeMetrics(t, "http://"+metricsAddr)
	for name, labels := range map[string]map[string]string{
		"taskmesh_outbox_relay_active":     {"relay": "quota"},
		"taskmesh_pg_pool_max_connections": {"pool": "quota"},
		"go_goroutines":                    nil,
	} {
		if _, ok := metrics.sum(name, labels); !ok {
			t.Errorf("--metrics-addr serves no %s%v", name, labels)
		}
	}
	// `taskmesh replay` finds the inline projection equal to its rebuild.
	rep, found, err := replayQuota(context.Background(), db.URL, false)
	if err != nil || !found || len(rep.Differences) != 0 || rep.Events == 0 {
		t.Fatalf("replay = %+v, %v, %v", rep, found, err)
	}
	if _, found, err := replayQuota(context.Background(), pgtest.New(t).URL, false); err != nil || found {
		t.Fatalf("replay of a database without the quota schema: %v, %v", found, err)
	}
}
