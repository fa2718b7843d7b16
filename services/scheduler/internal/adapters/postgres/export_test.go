package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// ClaimCandidates is claimCandidates of an agent never found lost, for
// tests that hold the transaction.
func ClaimCandidates(ctx context.Context, tx pgx.Tx, f app.ClaimFilter) ([]domain.Task, error) {
	return claimCandidates(ctx, tx, "", f)
}

// ClaimSQL is the claim's statement.
var ClaimSQL = claimSQL

// ClaimPlansOn is the claim's planning settings.
const ClaimPlansOn = claimPlansOn

// ByAttemptsSQL and UnheldSQL are the heartbeat's reads of an agent's
// tasks.
const (
	ByAttemptsSQL = byAttemptsSQL
	UnheldSQL     = unheldSQL
)

// PreemptionSQL is the sweeper's preemption statement.
const PreemptionSQL = preemptionSQL

// ActiveStatuses is the status predicate of task_views_active_idx.
const ActiveStatuses = activeStatuses

// ListQuery is TaskViews.List's statement.
var ListQuery = listQuery

// WriteBatchIn writes decisions about ids in tx as one of TaskStore's
// batches does (taskRows' lock, then its writes), without committing:
// for tests that put two writers side by side.
func WriteBatchIn(ctx context.Context, tx pgx.Tx, ids []string, decide func(t domain.Task, found bool) ([]domain.Record, error)) error {
	sql, args, read := taskRows{}.Lock(ids)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	found, err := read(rows)
	if err != nil {
		return err
	}
	var changes []pg.KeyedChange[domain.Task, traced]
	for _, id := range ids {
		before, ok := found[id]
		recs, err := decide(before, ok)
		if err != nil {
			return err
		}
		c := pg.KeyedChange[domain.Task, traced]{Key: id, Found: ok, Before: before, After: before}
		for _, r := range recs {
			c.After = domain.Apply(c.After, r)
			c.Events = append(c.Events, traced{Record: r})
		}
		changes = append(changes, c)
	}
	b := &pgx.Batch{}
	if _, err := (taskRows{}).Queue(b, changes); err != nil {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// EncodeWakeup and DecodeWakeup are the NOTIFY payload's codec.
var (
	EncodeWakeup = encodeWakeup
	DecodeWakeup = decodeWakeup
)

// PendingTasks is the hub's check of which tasks are pending.
func PendingTasks(ctx context.Context, db *pgxpool.Pool, ids []string) ([]string, error) {
	return Wakeups{DB: db}.pendingTasks(ctx, ids)
}
