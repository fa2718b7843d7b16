package scheduler_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

const internalToken = "test-internal-token"

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		if err := pg.Migrate(ctx, pool, scheduler.Schema, scheduler.Migrations()...); err != nil {
			return err
		}
		return pg.Migrate(ctx, pool, scheduler.PipelineSchema, scheduler.PipelineMigrations()...)
	}))
}

// env is one scheduler behind a real gRPC server, over a fresh database
// and broker.
type env struct {
	t      testing.TB
	pool   *pgxpool.Pool
	broker *kafkatest.Broker
	clock  *clocktest.Offset
	conn   *grpc.ClientConn
	cancel context.CancelFunc
}

func newEnv(t testing.TB, mutate ...func(*scheduler.Config)) *env {
	t.Helper()
	db := pgtest.New(t)
	pool, err := pg.Open(context.Background(), pg.Config{URL: db.URL, Schema: scheduler.Schema, MaxConns: 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return newEnvOn(t, pool, kafkatest.New(t, kafkatest.WithPartitions(4)), mutate...)
}

// newEnvOn is newEnv over a database and broker the test prepared.
func newEnvOn(t testing.TB, pool *pgxpool.Pool, broker *kafkatest.Broker, mutate ...func(*scheduler.Config)) *env {
	t.Helper()
	e := &env{t: t, pool: pool, broker: broker, clock: &clocktest.Offset{}}
	cfg := scheduler.Config{DB: e.pool, Kafka: e.broker.Config(), Partitions: 4, Now: e.clock.Now,
		Timing: scheduler.Timing{SweepInterval: 50 * time.Millisecond, PreemptAfter: 200 * time.Millisecond}}
	for _, m := range mutate {
		m(&cfg)
	}
	svc, err := scheduler.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: internalToken})
	if err != nil {
		t.Fatal(err)
	}
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis) }()
	go func() { defer close(done); _ = svc.Run(ctx) }()
	e.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), otel.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.conn.Close()
		cancel()
		srv.Stop()
		<-done
	})
	return e
}

// as returns a context acting as p, the way the gateway calls.
func as(p authn.Principal) context.Context {
	return authn.Outgoing(context.Background(), p, internalToken)
}

func user(tenant string) context.Context {
	return as(authn.Principal{Kind: authn.KindUser, TenantID: tenant, Subject: "key-" + tenant, RemoteIP: "10.0.0.1"})
}

func agent(id string) context.Context {
	return as(authn.Principal{Kind: authn.KindAgent, AgentID: id, Subject: id, RemoteIP: "10.0.1.1"})
}

func (e *env) tasks() taskv1.TaskServiceClient   { return taskv1.NewTaskServiceClient(e.conn) }
func (e *env) leases() taskv1.LeaseServiceClient { return taskv1.NewLeaseServiceClient(e.conn) }

func i32(v int32) *int32 { return &v }

func (e *env) create(ctx context.Context, spec *taskv1.TaskSpec) *taskv1.Task {
	e.t.Helper()
	resp, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: spec})
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
	return resp.GetTask()
}

func (e *env) claim(id, machine string, limit int32, labels ...string) []*taskv1.Task {
	e.t.Helper()
	resp, err := e.leases().ClaimTasks(agent(id), &taskv1.ClaimTasksRequest{AgentId: id, MachineId: machine, Limit: limit, Labels: labels})
	if err != nil {
		e.t.Fatalf("claim: %v", err)
	}
	return resp.GetTasks()
}

// claimWait is a long-polling claim. It returns its error instead of
// failing the test, so it can run on a goroutine of its own.
func (e *env) claimWait(id, machine string, limit int32, wait time.Duration) ([]*taskv1.Task, error) {
	resp, err := e.leases().ClaimTasks(agent(id), &taskv1.ClaimTasksRequest{AgentId: id, MachineId: machine, Limit: limit,
		Wait: durationpb.New(wait)})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return resp.GetTasks(), nil
}

// code returns the business code of a gRPC error (0 if none).
func code(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()["code"]
		}
	}
	return ""
}

// eventually polls cond until it holds or fails the test after d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
