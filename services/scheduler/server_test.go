package scheduler_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// schedulerSessions returns a count of the sessions a scheduler's own pool
// holds on db.
func schedulerSessions(t *testing.T, db *pgtest.DB) func() int {
	admin := db.Open(t, "public")
	return func() int {
		t.Helper()
		var n int
		err := admin.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'taskmesh-scheduler'`, db.Name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func serverConfig(db *pgtest.DB, broker *kafkatest.Broker) scheduler.ServerConfig {
	return scheduler.ServerConfig{
		Service:     scheduler.Config{Kafka: broker.Config(), Partitions: 2, InternalToken: internalToken},
		DatabaseURL: db.URL, MaxConns: 25, Listen: "127.0.0.1:0",
	}
}

// The process form opens and migrates its own database, serves the task
// API with the internal token required, and on ctx's end stops and closes
// the pool it opened.
func TestServerServesOnItsOwnDatabaseAndReleasesIt(t *testing.T) {
	db := pgtest.New(t)
	srv, err := scheduler.NewServer(context.Background(), serverConfig(db, kafkatest.New(t, kafkatest.WithPartitions(2))))
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
	tasks := taskv1.NewTaskServiceClient(conn)
	created, err := tasks.CreateTask(user("acme"), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "t", Command: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tasks.GetTask(user("acme"), &taskv1.GetTaskRequest{Id: created.GetTask().GetId()}); err != nil || got.GetTask().GetStatus() != "pending" {
		t.Fatalf("GetTask = %v, %v", got, err)
	}
	if _, err := tasks.GetTask(context.Background(), &taskv1.GetTaskRequest{Id: created.GetTask().GetId()}); err == nil {
		t.Error("a call without the internal token was served")
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
	sessions := schedulerSessions(t, db)
	eventually(t, 10*time.Second, "the scheduler's pool to close", func() bool { return sessions() == 0 })
}

func TestNewServerRefusesAndReleases(t *testing.T) {
	db := pgtest.New(t)
	broker := kafkatest.New(t, kafkatest.WithPartitions(2))
	cfg := serverConfig(db, broker)
	cfg.Service.InternalToken = ""
	if _, err := scheduler.NewServer(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "InternalToken") {
		t.Errorf("NewServer without an internal token = %v", err)
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg = serverConfig(db, broker)
	cfg.Listen = busy.Addr().String()
	if _, err := scheduler.NewServer(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("NewServer on a busy port = %v", err)
	}
	// The pool it had opened is closed again.
	sessions := schedulerSessions(t, db)
	eventually(t, 10*time.Second, "the scheduler's pool to close", func() bool { return sessions() == 0 })
}
