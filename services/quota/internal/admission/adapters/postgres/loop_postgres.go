package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/leader"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

// loopLock is the advisory lock that elects the active admission loop
// among the replicas.
const loopLock = "admission-loop"

// Lead implements app.LoopStore with leader.Run over s.DB: a session holds
// the advisory lock loopLock on one connection of the pool, and its reads
// and transactions all run on that connection. A transaction there cannot
// commit once the lock is gone (the lock is the connection's: a broken
// connection loses both), so no cycle of a replica that lost the lock is
// recorded beside the new leader's.
func (s Store) Lead(ctx context.Context, retry time.Duration, log *slog.Logger, session func(context.Context, app.LoopSession) error) error {
	return leader.Run(ctx, s.DB, leader.Config{Lock: loopLock, Role: "admission loop", Standby: retry,
		MinBackoff: retry, MaxBackoff: retry, Logger: log}, func(ctx context.Context, lock *pg.Lock) error {
		return session(ctx, loopSession{lock: lock, events: s.Events})
	})
}

// loopSession implements app.LoopSession on the lock's connection.
type loopSession struct {
	lock   *pg.Lock
	events *eventstore.Store
}

var _ app.LoopSession = loopSession{}

func (l loopSession) Alive(ctx context.Context) error { return l.lock.Alive(ctx) }

func (l loopSession) Waiting(ctx context.Context, after int64) (int64, bool, error) {
	return waiting(ctx, l.lock.Conn(), after)
}

func (l loopSession) Rebuild(ctx context.Context, fn func(app.LoopTx) error) error {
	return pg.InTx(ctx, l.lock.Conn(), pgx.TxOptions{}, func(tx pgx.Tx) error {
		return fn(loopTx{ctx: ctx, tx: tx, events: l.events})
	})
}

// Cycle pipelines the transaction (pg.PipelinedTx): BEGIN is sent with
// the first batch, StartCycle's reads, and COMMIT with SaveCycle's writes,
// the cycle's last.
func (l loopSession) Cycle(ctx context.Context, fn func(app.LoopTx) error) error {
	return pg.InPipelinedTx(ctx, l.lock.Conn().Conn(), func(tx *pg.PipelinedTx) error {
		return fn(loopTx{ctx: ctx, tx: tx, pipelined: tx, events: l.events})
	})
}

// loopTx implements app.LoopTx in one transaction; pipelined is that
// transaction when it is a cycle's.
type loopTx struct {
	ctx       context.Context
	tx        pgx.Tx
	pipelined *pg.PipelinedTx
	events    *eventstore.Store
}

var _ app.LoopTx = loopTx{}

func (t loopTx) DefinitionsGeneration() (int64, error) { return definitionsGeneration(t.ctx, t.tx) }

func (t loopTx) LoadDefinitions() (app.Definitions, error) { return loadDefinitions(t.ctx, t.tx) }

func (t loopTx) LoadWorkloads() ([]app.WorkloadRecord, error) { return loadWorkloads(t.ctx, t.tx) }

func (t loopTx) StartCycle(after int64, limit int, direct []app.Fact) (app.CycleStart, error) {
	return startCycle(t.ctx, t.tx, after, limit, direct)
}

func (t loopTx) SaveCycle(events []eventstore.Event, changed []*app.WorkloadRecord, removed []string, consumed []app.Fact) error {
	if t.pipelined != nil {
		t.pipelined.CommitWithNextBatch()
	}
	return saveCycle(t.ctx, t.tx, t.events, events, changed, removed, consumed)
}
