package pg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

// A pipelined transaction reads in one batch (BEGIN in front) and writes
// in another (COMMIT behind): two round trips, all or nothing, and the
// connection is out of any transaction afterwards.
func TestPipelinedTx(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	mustExec(t, pool, `CREATE TABLE pipelined (id int PRIMARY KEY, v text NOT NULL)`)
	mustExec(t, pool, `INSERT INTO pipelined VALUES (1, 'one')`)
	ctx := testCtx(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	inTx := func(t *testing.T) bool {
		t.Helper()
		return conn.Conn().PgConn().TxStatus() != 'I'
	}
	count := func(t *testing.T, where string) int {
		return queryInt(t, pool, `SELECT count(*) FROM pipelined WHERE `+where)
	}

	t.Run("reads and writes in two batches", func(t *testing.T) {
		var v string
		err := pg.InPipelinedTx(ctx, conn.Conn(), func(tx *pg.PipelinedTx) error {
			read := &pgx.Batch{}
			read.Queue(`SELECT v FROM pipelined WHERE id = 1 FOR UPDATE`).QueryRow(func(r pgx.Row) error { return r.Scan(&v) })
			if err := tx.SendBatch(ctx, read).Close(); err != nil {
				return err
			}
			if !inTx(t) {
				t.Error("no transaction after the first batch")
			}
			tx.CommitWithNextBatch()
			write := &pgx.Batch{}
			write.Queue(`INSERT INTO pipelined VALUES (2, $1)`, v+"+1")
			res := tx.SendBatch(ctx, write)
			if _, err := res.Exec(); err != nil {
				res.Close()
				return err
			}
			return res.Close()
		})
		if err != nil || v != "one" || count(t, `id = 2 AND v = 'one+1'`) != 1 || inTx(t) {
			t.Fatalf("err %v, read %q, row 2 committed %d, still in a transaction %v", err, v, count(t, "id = 2"), inTx(t))
		}
	})

	t.Run("a failed write in the committing batch commits nothing", func(t *testing.T) {
		err := pg.InPipelinedTx(ctx, conn.Conn(), func(tx *pg.PipelinedTx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO pipelined VALUES (3, 'three')`); err != nil {
				return err
			}
			tx.CommitWithNextBatch()
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO pipelined VALUES (4, 'four')`)
			b.Queue(`INSERT INTO pipelined VALUES (1, 'duplicate')`)
			return tx.SendBatch(ctx, b).Close()
		})
		if !pg.IsUniqueViolation(err, "pipelined_pkey") || count(t, "id IN (3, 4)") != 0 || inTx(t) {
			t.Fatalf("err %v, rows 3 and 4: %d, still in a transaction %v", err, count(t, "id IN (3, 4)"), inTx(t))
		}
	})

	t.Run("fn's error rolls back", func(t *testing.T) {
		sentinel := errors.New("sentinel")
		err := pg.InPipelinedTx(ctx, conn.Conn(), func(tx *pg.PipelinedTx) error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO pipelined VALUES (5, 'five')`)
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			return sentinel
		})
		if !errors.Is(err, sentinel) || count(t, "id = 5") != 0 || inTx(t) {
			t.Fatalf("err %v, row 5: %d, still in a transaction %v", err, count(t, "id = 5"), inTx(t))
		}
	})

	t.Run("a transaction that sent nothing commits nothing", func(t *testing.T) {
		if err := pg.InPipelinedTx(ctx, conn.Conn(), func(*pg.PipelinedTx) error { return nil }); err != nil || inTx(t) {
			t.Fatalf("err %v, still in a transaction %v", err, inTx(t))
		}
	})

	t.Run("statements take the locks of a transaction", func(t *testing.T) {
		other := lockWaiter(t, ctx, pool)
		err := pg.InPipelinedTx(ctx, conn.Conn(), func(tx *pg.PipelinedTx) error {
			b := &pgx.Batch{}
			b.Queue(`SELECT 1 FROM pipelined WHERE id = 1 FOR UPDATE`)
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			if other() {
				t.Error("another transaction updated a row this one holds")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !other() {
			t.Error("the row stayed locked after the commit")
		}
	})
}

// lockWaiter returns a probe: whether another connection can update row
// 1 without waiting.
func lockWaiter(t *testing.T, ctx context.Context, pool *pgxpool.Pool) func() bool {
	return func() bool {
		t.Helper()
		var timedOut bool
		err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE pipelined SET v = v WHERE id = 1`)
			timedOut = err != nil
			return err
		})
		if err != nil && !timedOut {
			t.Fatal(err)
		}
		return err == nil
	}
}
