package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// rollbackTimeout bounds the ROLLBACK sent after a failed fn. It runs on a
// context detached from the caller's, because the usual reason fn failed is
// that ctx was cancelled, and a rollback that is never sent would leave the
// connection to be discarded instead of returned to the pool.
const rollbackTimeout = 5 * time.Second

// InTx runs fn in a transaction; commit if fn returns nil, rollback otherwise.
// It returns fn's error unchanged (so errors.Is/As see what fn returned); a
// failed rollback is not reported because the transaction is gone either way
// (PostgreSQL aborts it when the connection closes). A commit failure is
// returned wrapped, and can itself be a serialization failure to retry (see
// IsSerializationFailure). If fn panics the transaction is rolled back and the
// panic continues.
//
// db is typically a *pgxpool.Pool, a *pgx.Conn or a *pgxpool.Conn (such as
// Lock.Conn()).
func InTx(ctx context.Context, db interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("pg: begin: %w", err)
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true // a failed COMMIT ends the transaction too; nothing to roll back
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pg: commit: %w", err)
	}
	return nil
}

// txAttempts bounds InTxRetried's runs of one transaction.
const txAttempts = 5

// InTxRetried is InTx for a command decided inside its transaction: when
// Postgres aborted the transaction only because of concurrent ones
// (IsSerializationFailure: a deadlock, a serialization failure, an event
// the event store refused because a newer transaction wrote its
// predecessor), fn runs again from the start in a new transaction, up to
// txAttempts times in all. fn must act on tx alone: it may run more than
// once.
func InTxRetried(ctx context.Context, db interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := InTx(ctx, db, opts, fn)
		if err == nil || attempt == txAttempts || !IsSerializationFailure(err) || ctx.Err() != nil {
			return err
		}
	}
}
