package consumers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/consumers"
)

const internalToken = "consumers-test-internal-token-0123456789"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(runChild())
	}
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, consumers.Schema, consumers.Migrations()...)
	}))
}

// env is a database and a broker; services started on it share them.
type env struct {
	t      *testing.T
	db     *pgtest.DB
	pool   *pgxpool.Pool
	broker *kafkatest.Broker
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := pgtest.New(t)
	pool, err := pg.Open(context.Background(), pg.Config{URL: db.URL, Schema: consumers.Schema, MaxConns: 48})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &env{t: t, db: db, pool: pool, broker: kafkatest.New(t, kafkatest.WithPartitions(4))}
}

func webhookKey() []byte {
	k := make([]byte, consumers.WebhookKeySize)
	rand.Read(k)
	return k
}

// service is a running consumers server and a client of its gRPC API.
type service struct {
	*consumers.Server
	conn *grpc.ClientConn
	stop func()
}

// start runs the service on e with cfg (DB, Kafka and a webhook key
// filled in when unset).
func (e *env) start(cfg consumers.Config) *service {
	e.t.Helper()
	if cfg.DB == nil {
		cfg.DB = e.pool
	}
	cfg.Kafka, cfg.Partitions = e.broker.Config(), 4
	if cfg.Webhooks.Key == nil {
		cfg.Webhooks.Key = webhookKey()
	}
	srv, err := consumers.NewServer(context.Background(), consumers.ServerConfig{Service: cfg, Listen: "127.0.0.1:0",
		InternalToken: internalToken})
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	s := &service{Server: srv, conn: conn}
	s.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("consumers service: %v", err)
			}
			conn.Close()
		})
	}
	e.t.Cleanup(s.stop)
	return s
}

// as returns a context calling as p through the internal token, as the
// gateway does.
func as(p authn.Principal) context.Context {
	return authn.Outgoing(context.Background(), p, internalToken)
}

func tenantKey(tenant string) context.Context {
	return as(authn.Principal{Kind: authn.KindUser, TenantID: tenant, Subject: "key-" + tenant, RemoteIP: "203.0.113.1"})
}

var operator = as(authn.Principal{Kind: authn.KindAdmin, Subject: "op"})

func (s *service) audit() auditv1.AuditServiceClient { return auditv1.NewAuditServiceClient(s.conn) }
func (s *service) usage() usagev1.UsageServiceClient { return usagev1.NewUsageServiceClient(s.conn) }
func (s *service) hooks() webhookv1.WebhookServiceClient {
	return webhookv1.NewWebhookServiceClient(s.conn)
}
func (s *service) deadLetters() deadletterv1.DeadLetterServiceClient {
	return deadletterv1.NewDeadLetterServiceClient(s.conn)
}

// script writes task events as the scheduler's relay would: keyed by task,
// with the event id header, versions counted per task.
type script struct {
	t        *testing.T
	versions map[string]int64
	records  []*kgo.Record
	n        int
}

func newScript(t *testing.T) *script { return &script{t: t, versions: map[string]int64{}} }

// add appends task's next event at time at.
func (s *script) add(tenant, task string, at time.Time, ev *taskv1.TaskEvent) *taskv1.TaskEvent {
	s.t.Helper()
	s.versions[task]++
	s.n++
	ev.EventId = fmt.Sprintf("%08d-%s-%d", s.n, task, s.versions[task])
	ev.AggregateId, ev.Version, ev.TenantId, ev.OccurredAt = task, s.versions[task], tenant, timestamppb.New(at)
	if ev.Actor == "" {
		ev.Actor = "key-" + tenant
	}
	b, err := proto.Marshal(ev)
	if err != nil {
		s.t.Fatal(err)
	}
	s.records = append(s.records, &kgo.Record{Topic: consumers.TaskTopic, Key: []byte(task), Value: b,
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte(ev.EventId)}}})
	return ev
}

// produce sends copies of recs to the broker (a record carries the state
// of its last produce) and waits until they are written.
func (e *env) produce(recs []*kgo.Record) {
	e.t.Helper()
	fresh := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		fresh[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	recs = fresh
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.broker.Addrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Events a test builds tasks from.
func submitted(spec *taskv1.TaskSpec) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{Spec: spec}}}
}

func started(attempt string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Started{Started: &taskv1.TaskStarted{AttemptId: attempt}}}
}

func succeeded(attempt string) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{AttemptId: attempt}}}
}

func failed(attempt string, retryFollows bool) *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{AttemptId: attempt, Error: "exit code 1",
		Reason: "exit_code", RetryFollows: retryFollows}}}
}

func retried() *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_RetryScheduled{RetryScheduled: &taskv1.TaskRetryScheduled{RetryCount: 1}}}
}

func cancelled() *taskv1.TaskEvent {
	return &taskv1.TaskEvent{Event: &taskv1.TaskEvent_Canceled{Canceled: &taskv1.TaskCanceled{Reason: "not needed"}}}
}

func hasPrefix(s, p string) bool { return strings.HasPrefix(s, p) }
