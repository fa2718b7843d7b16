package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// maxAttempts bounds the runs of a group's command whose decision was made
// on member tasks that moved on meanwhile (GroupStore.Mutate).
const maxAttempts = 5

// writeTx runs fn in a transaction for the stores whose commands lock
// their aggregate's row and decide in one transaction (task groups,
// templates, managed services), run again when Postgres aborted it only
// because of concurrent transactions (pg.InTxRetried), and calls after,
// if set, once it has committed.
func writeTx(ctx context.Context, db *pgxpool.Pool, after func(), fn func(tx pgx.Tx) error) error {
	err := pg.InTxRetried(ctx, db, pgx.TxOptions{}, fn)
	if err == nil && after != nil {
		after()
	}
	return err
}
