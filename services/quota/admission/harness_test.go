package admission_test

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/quota/admission"
)

const internalToken = "test-internal-token"

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, admission.Schema, admission.Migrations()...)
	}))
}

// env is the admission layer behind a real gRPC server, over a fresh
// database and broker. Task events are produced to the task topic the way
// the scheduler publishes them.
type env struct {
	t        testing.TB
	url      string
	pool     *pgxpool.Pool
	broker   *kafkatest.Broker
	producer *kgo.Client
	svc      *admission.Service
	conn     *grpc.ClientConn
	stop     func()
}

func newEnv(t testing.TB, mutate ...func(*admission.Config)) *env {
	t.Helper()
	db := pgtest.New(t)
	// One partition: the layer learns of tasks in the order the tests
	// submit them, so which of several equal tasks is admitted first is
	// known. (Across partitions, a later task's fact may arrive first.)
	e := &env{t: t, url: db.URL, broker: kafkatest.New(t, kafkatest.WithPartitions(1))}
	e.pool = e.open()
	opts, err := e.broker.Config().Opts()
	if err != nil {
		t.Fatal(err)
	}
	e.producer, err = kgo.NewClient(append(opts, kgo.DefaultProduceTopic(admission.TaskTopic), kgo.AllowAutoTopicCreation())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.producer.Close)
	e.start(mutate...)
	return e
}

func (e *env) open() *pgxpool.Pool {
	pool, err := pg.Open(context.Background(), pg.Config{URL: e.url, Schema: admission.Schema, MaxConns: 20})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	return pool
}

// start runs a service instance; a previous one is stopped first.
func (e *env) start(mutate ...func(*admission.Config)) {
	e.t.Helper()
	if e.stop != nil {
		e.stop()
	}
	svc, conn, stop := e.instance(e.pool, mutate...)
	e.svc, e.conn, e.stop = svc, conn, stop
	e.t.Cleanup(stop)
}

// instance runs one more service instance on pool.
func (e *env) instance(pool *pgxpool.Pool, mutate ...func(*admission.Config)) (*admission.Service, *grpc.ClientConn, func()) {
	e.t.Helper()
	cfg := admission.Config{DB: pool, Kafka: e.broker.Config(), Partitions: 1, Tick: 20 * time.Millisecond, Logger: testLogger(e.t)}
	for _, m := range mutate {
		m(&cfg)
	}
	svc, err := admission.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	// As the quota server does: the defaults exist before anyone is
	// answered.
	if err := svc.RecordDefaults(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	srv, err := grpcserver.New(grpcserver.Options{InternalToken: internalToken})
	if err != nil {
		e.t.Fatal(err)
	}
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis) }()
	go func() { defer close(done); _ = svc.Run(ctx) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	stopped := false
	return svc, conn, func() {
		if stopped {
			return
		}
		stopped = true
		conn.Close()
		cancel()
		srv.Stop()
		<-done
	}
}

func (e *env) client() quotav1.AdmissionServiceClient {
	return quotav1.NewAdmissionServiceClient(e.conn)
}

func as(p authn.Principal) context.Context {
	return authn.Outgoing(context.Background(), p, internalToken)
}

func admin() context.Context {
	return as(authn.Principal{Kind: authn.KindAdmin, Subject: "operator"})
}

func user(tenant, tier string) context.Context {
	return as(authn.Principal{Kind: authn.KindUser, TenantID: tenant, Subject: "key-" + tenant, Tier: tier})
}

// task is a task as the test drives its events.
type task struct {
	id, tenant, queue string
	priority          int32
	gpus              string
	version           int64
}

// publish produces the task's next event.
func (e *env) publish(tk *task, ev any) {
	e.t.Helper()
	tk.version++
	env := &taskv1.TaskEvent{EventId: tk.id + "-" + time.Now().String(), AggregateId: tk.id, Version: tk.version,
		OccurredAt: timestamppb.Now(), TenantId: tk.tenant, Actor: "scheduler"}
	switch ev := ev.(type) {
	case *taskv1.TaskSubmitted:
		env.Event = &taskv1.TaskEvent_Submitted{Submitted: ev}
	case *taskv1.TaskRequeued:
		env.Event = &taskv1.TaskEvent_Requeued{Requeued: ev}
	case *taskv1.TaskPreempted:
		env.Event = &taskv1.TaskEvent_Preempted{Preempted: ev}
	case *taskv1.TaskSucceeded:
		env.Event = &taskv1.TaskEvent_Succeeded{Succeeded: ev}
	case *taskv1.TaskFailed:
		env.Event = &taskv1.TaskEvent_Failed{Failed: ev}
	case *taskv1.TaskRetryScheduled:
		env.Event = &taskv1.TaskEvent_RetryScheduled{RetryScheduled: ev}
	case *taskv1.TaskLeased:
		env.Event = &taskv1.TaskEvent_Leased{Leased: ev}
	case *taskv1.TaskDeleted:
		env.Event = &taskv1.TaskEvent_Deleted{Deleted: ev}
	default:
		e.t.Fatalf("publish: unexpected %T", ev)
	}
	e.produce(tk.id, env)
}

func (e *env) produce(key string, env *taskv1.TaskEvent) {
	e.t.Helper()
	b, err := proto.Marshal(env)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.producer.ProduceSync(context.Background(), &kgo.Record{Key: []byte(key), Value: b}).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) submit(tk *task) {
	e.t.Helper()
	p := tk.priority
	e.publish(tk, &taskv1.TaskSubmitted{ClusterQueue: tk.queue,
		Spec: &taskv1.TaskSpec{Name: tk.id, Type: "shell", Priority: &p, Resources: map[string]string{"nvidia.com/gpu": tk.gpus}}})
}

// state reads a workload's recorded state and stay ("" if none).
func (e *env) state(id string) (state string, taskVersion int64) {
	e.t.Helper()
	err := e.pool.QueryRow(context.Background(), `SELECT state, task_version FROM workloads WHERE task_id = $1`, id).Scan(&state, &taskVersion)
	if err != nil && err.Error() != "no rows in result set" {
		e.t.Fatal(err)
	}
	return state, taskVersion
}

// waitState waits until the workload has state at stay taskVersion.
func (e *env) waitState(id, want string, taskVersion int64) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, v := e.state(id)
		if got == want && v == taskVersion {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("workload %s: state %q at stay %d, want %q at %d", id, got, v, want, taskVersion)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// events returns the recorded event types of a workload, in order.
func (e *env) events(id string) []string {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT event_type FROM events WHERE aggregate_id = $1 ORDER BY version`, "workload/"+id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// quotaEvent returns the payload of a workload's event at version.
func (e *env) quotaEvent(id string, version int64) *quotav1.QuotaEvent {
	e.t.Helper()
	var b []byte
	if err := e.pool.QueryRow(context.Background(), `SELECT payload FROM events WHERE aggregate_id = $1 AND version = $2`,
		"workload/"+id, version).Scan(&b); err != nil {
		e.t.Fatal(err)
	}
	var env quotav1.QuotaEvent
	if err := proto.Unmarshal(b, &env); err != nil {
		e.t.Fatal(err)
	}
	return &env
}

// testLogger logs warnings and errors through t while the test runs.
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testWriter passes lines to t.Log until the test's cleanup, and drops
// them after it: a line can come later than the service that wrote it (a
// repeated warning's count is written when its window ends, package
// logthrottle), and t.Log after the test panics.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}
