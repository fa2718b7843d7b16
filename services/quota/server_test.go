package quota_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/quota/admission"
)

// ownSessions returns a count of the sessions the quota server's own pools
// hold on db.
func ownSessions(t *testing.T, db *pgtest.DB) func() int {
	admin := db.Open(t, "public")
	return func() int {
		t.Helper()
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND application_name IN ('taskmesh-quota', 'taskmesh-admission')`, db.Name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func serverConfig(db *pgtest.DB, broker *kafkatest.Broker) quota.ServerConfig {
	return quota.ServerConfig{Service: quota.Config{Kafka: broker.Config(), Partitions: 2},
		Admission:   admission.Config{Partitions: 2},
		DatabaseURL: db.URL, Listen: "127.0.0.1:0", InternalToken: internalToken}
}

// The process form runs the quota service and the admission layer, each
// on its own schema of one database, behind one gRPC server; on ctx's end
// it stops and closes the pools it opened.
func TestServerServesBothLayersAndReleasesItsPools(t *testing.T) {
	db := pgtest.New(t)
	srv, err := quota.NewServer(context.Background(), serverConfig(db, kafkatest.New(t, kafkatest.WithPartitions(2))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	if _, err := quotav1.NewQuotaServiceClient(conn).RegisterTenant(operator(),
		&quotav1.RegisterTenantRequest{TenantId: "acme", Name: "Acme"}); err != nil {
		t.Fatalf("QuotaService: %v", err)
	}
	// The embedded default queues exist from the server's first answer.
	queues := quotav1.NewAdmissionServiceClient(conn)
	if cqs, err := queues.ListClusterQueues(operator(), &quotav1.ListClusterQueuesRequest{}); err != nil ||
		!slices.ContainsFunc(cqs.GetClusterQueues(), func(q *quotav1.ClusterQueue) bool { return q.Name == admission.HighPriorityQueue }) {
		t.Fatalf("the first list of cluster queues = %v, %v; want the defaults in it", cqs, err)
	}
	// Both layers answer callers in the process too (a scheduler beside
	// the quota service), behind the same authentication.
	if _, err := quotav1.NewQuotaServiceClient(srv.Local()).GetTenant(operator(),
		&quotav1.GetTenantRequest{TenantId: "acme"}); err != nil {
		t.Fatalf("QuotaService in-process: %v", err)
	}
	local := quotav1.NewAdmissionServiceClient(srv.Local())
	if lqs, err := local.ListLocalQueues(operator(), &quotav1.ListLocalQueuesRequest{}); err != nil || len(lqs.GetLocalQueues()) == 0 {
		t.Fatalf("AdmissionService in-process: %v, %v", lqs, err)
	}
	if _, err := local.ListLocalQueues(context.Background(), &quotav1.ListLocalQueuesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an in-process call without credentials: %v, want Unauthenticated", err)
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
	sessions := ownSessions(t, db)
	waitFor(t, "the quota server's pools to close", func() bool { return sessions() == 0 })
	if _, err := local.ListLocalQueues(operator(), &quotav1.ListLocalQueuesRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("an in-process call after the stop: %v, want Unavailable", err)
	}
}

func TestNewServerRefusesAndReleases(t *testing.T) {
	db := pgtest.New(t)
	broker := kafkatest.New(t, kafkatest.WithPartitions(2))
	cfg := serverConfig(db, broker)
	cfg.InternalToken = ""
	if _, err := quota.NewServer(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "internal token") {
		t.Errorf("NewServer without an internal token = %v", err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg = serverConfig(db, broker)
	cfg.Listen = busy.Addr().String()
	if _, err := quota.NewServer(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("NewServer on a busy port = %v", err)
	}
	sessions := ownSessions(t, db)
	waitFor(t, "the quota server's pools to close", func() bool { return sessions() == 0 })
}
