package quota_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/kafkatest"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/inprocess"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, quota.Schema, quota.Migrations()...)
	}))
}

var admin = app.Caller{Admin: true}

// env is a database, a broker and a cluster (the in-process operator) that
// outlive the quota service instances started on them.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	broker *kafkatest.Broker
	op     *inprocess.Operator
	svc    *quota.Service
	stop   func() error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := pgtest.New(t)
	pool, err := pg.Open(context.Background(), pg.Config{URL: db.URL, Schema: quota.Schema, MaxConns: 12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := &env{t: t, pool: pool, broker: kafkatest.New(t, kafkatest.WithPartitions(2)),
		op: inprocess.New(inprocess.Config{Delay: 30 * time.Millisecond})}
	e.start(nil)
	t.Cleanup(func() { _ = e.stop() })
	return e
}

// start runs a fresh service instance on the env (stopping the previous
// one); fault is its process manager's fault hook.
func (e *env) start(fault func(step string) error) {
	e.t.Helper()
	if e.stop != nil {
		_ = e.stop()
	}
	svc, err := quota.New(quota.Config{DB: e.pool, Kafka: e.broker.Config(), Partitions: 2, Operator: e.op,
		PassInterval: 10 * time.Millisecond, Fault: fault})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	var result error
	e.svc = svc
	e.stop = func() error {
		once.Do(func() { cancel(); result = <-done })
		return result
	}
}

// crashAt starts an instance that stops at step (the first time it is
// reached) and waits until it has.
func (e *env) crashAt(step string, during func()) {
	e.t.Helper()
	stopped := make(chan struct{})
	var once sync.Once
	e.start(func(s string) error {
		if s != step {
			return nil
		}
		once.Do(func() { close(stopped) })
		return errors.New("crash")
	})
	during()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		e.t.Fatalf("step %s never reached", step)
	}
	if err := e.stop(); !errors.Is(err, app.ErrStopped) {
		e.t.Fatalf("instance stopped with %v, want ErrStopped", err)
	}
}

func (e *env) app() *app.App { return e.svc.App() }

func (e *env) seed(tenant, cluster, machineType string, gpus int64) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.app().RegisterTenant(ctx, admin, tenant, "Tenant "+tenant); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.app().CreateCluster(ctx, admin, cluster, ""); err != nil && !errors.Is(err, capacity.ErrExists) {
		e.t.Fatal(err)
	}
	if _, err := e.app().SetInventory(ctx, admin, cluster, machineType, gpus); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) createGU(tenant, cluster, name, machineType string, min, max int64, children ...capacity.Spec) app.QuotaView {
	e.t.Helper()
	v, err := e.app().CreateQuota(context.Background(), admin, capacity.CreateQuota{TenantID: tenant, Cluster: cluster, Kind: capacity.KindGU,
		Spec: capacity.Spec{Name: name, Min: min, Max: max, MachineType: machineType, Children: children}})
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) quota(id string) app.QuotaView {
	e.t.Helper()
	v, err := e.app().GetQuota(context.Background(), admin, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// waitStatus waits until the quota has status.
func (e *env) waitStatus(id, status string) app.QuotaView {
	e.t.Helper()
	var v app.QuotaView
	eventually(e.t, "quota "+id+" to be "+status, func() bool {
		v = e.quota(id)
		return v.Quota.Status == status
	})
	return v
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventCount counts recorded events of a type for an aggregate.
func (e *env) eventCount(aggregate, typ string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE aggregate_id = $1 AND event_type = $2`,
		aggregate, typ).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func allQuotas() app.QuotaFilter { return app.QuotaFilter{} }
