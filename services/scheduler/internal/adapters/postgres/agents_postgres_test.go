package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// roundTrips counts what a pool sends: single statements and batches.
type roundTrips struct {
	mu               sync.Mutex
	queries, batches int
}

func (r *roundTrips) add(n *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*n++
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.add(&r.queries)
	return ctx
}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.add(&r.batches)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) counts() (queries, batches int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queries, r.batches
}

// A heartbeat is one batch: the agent's row and every read its answer
// depends on, one wait for the database however loaded the machine
// (docs/executor.md, "Fencing"); an error in it changes nothing.
func TestHeartbeatIsOneBatch(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, scheduler.Schema)
	cfg := pool.Config()
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	cfg.MaxConns = 1 // the statements prepared by the first calls are the ones the failing call runs
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	now := time.Now().UTC().Truncate(time.Microsecond)
	agents := postgres.Agents{DB: traced}
	a := app.Agent{AgentID: "a1", MachineID: "m1", LastHeartbeatAt: now, LostAfter: now.Add(time.Minute)}
	for _, held := range [][]string{nil, {"att-1", "att-2"}} {
		q0, b0 := trips.counts()
		r, err := agents.Heartbeat(ctx, a, held)
		if err != nil {
			t.Fatal(err)
		}
		if q, b := trips.counts(); q != q0 || b != b0+1 {
			t.Errorf("heartbeat holding %v: %d statements and %d batches, want one batch", held, q-q0, b-b0)
		}
		if r.Drained || len(r.Held)+len(r.Preempted)+len(r.Unheld) != 0 {
			t.Errorf("heartbeat of an agent with nothing = %+v", r)
		}
	}

	// A read failing after the write has run undoes the write: the batch
	// is one transaction. (The statements are prepared; the table one of
	// them reads is gone when it runs.)
	if _, err := pool.Exec(ctx, `DROP TABLE agent_drains`); err != nil {
		t.Fatal(err)
	}
	later := a
	later.LostAfter = now.Add(time.Hour)
	_, err = agents.Heartbeat(ctx, later, nil)
	if err == nil {
		t.Fatal("a heartbeat whose read fails succeeded")
	}
	t.Logf("the failed heartbeat: %v", err)
	var lostAfter time.Time
	if err := pool.QueryRow(ctx, `SELECT lost_after FROM agents WHERE agent_id = 'a1'`).Scan(&lostAfter); err != nil ||
		!lostAfter.Equal(a.LostAfter) {
		t.Errorf("lost_after after a failed heartbeat = %v, %v; want %v (unchanged)", lostAfter, err, a.LostAfter)
	}
}
