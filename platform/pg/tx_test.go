package pg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

type codedError struct{ code int }

func (e *codedError) Error() string { return fmt.Sprint("code ", e.code) }

func TestInTx(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	mustExec(t, pool, `CREATE TABLE entries (id int PRIMARY KEY)`)
	ctx := testCtx(t)

	t.Run("commits when fn succeeds", func(t *testing.T) {
		err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO entries VALUES (1)`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := queryInt(t, pool, `SELECT count(*) FROM entries WHERE id = 1`); n != 1 {
			t.Error("row not committed")
		}
	})

	t.Run("rolls back and returns fn's error", func(t *testing.T) {
		sentinel := errors.New("sentinel")
		err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO entries VALUES (2)`); err != nil {
				return err
			}
			return fmt.Errorf("wrapped: %w", errors.Join(sentinel, &codedError{7}))
		})
		var coded *codedError
		if !errors.Is(err, sentinel) || !errors.As(err, &coded) || coded.code != 7 {
			t.Errorf("InTx returned %v, want fn's error with its chain intact", err)
		}
		if n := queryInt(t, pool, `SELECT count(*) FROM entries WHERE id = 2`); n != 0 {
			t.Error("row of failed transaction committed")
		}
	})

	t.Run("rolls back on panic and re-panics", func(t *testing.T) {
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("recovered %v, want the original panic", r)
				}
			}()
			_ = pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO entries VALUES (3)`); err != nil {
					return err
				}
				panic("boom")
			})
		}()
		if n := queryInt(t, pool, `SELECT count(*) FROM entries WHERE id = 3`); n != 0 {
			t.Error("row of panicking transaction committed")
		}
	})

	t.Run("rolls back when ctx is cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		err := pg.InTx(cctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(cctx, `INSERT INTO entries VALUES (4)`); err != nil {
				return err
			}
			cancel()
			return cctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("InTx returned %v, want context.Canceled", err)
		}
		if n := queryInt(t, pool, `SELECT count(*) FROM entries WHERE id = 4`); n != 0 {
			t.Error("row of cancelled transaction committed")
		}
	})

	t.Run("reports a failed commit", func(t *testing.T) {
		mustExec(t, pool, `CREATE TABLE deferred (k int, CONSTRAINT deferred_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)`)
		err := pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO deferred VALUES (1), (1)`)
			return err // the duplicate is only checked at COMMIT
		})
		if !pg.IsUniqueViolation(err, "deferred_k") {
			t.Errorf("InTx returned %v, want the unique violation raised by COMMIT", err)
		}
		if n := queryInt(t, pool, `SELECT count(*) FROM deferred`); n != 0 {
			t.Error("rows of failed commit visible")
		}
	})

	t.Run("honours TxOptions", func(t *testing.T) {
		err := pg.InTx(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO entries VALUES (5)`)
			return err
		})
		if err == nil {
			t.Error("insert succeeded in a read-only transaction")
		}
	})
}

// InTxRetried runs a transaction Postgres aborted for a serialization
// failure again from the start, at most five times in all, and returns
// any other error at once; what a failed run wrote is rolled back.
func TestInTxRetried(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	mustExec(t, pool, `CREATE TABLE attempts (run int PRIMARY KEY)`)
	ctx := testCtx(t)
	const abort = `DO $$ BEGIN RAISE EXCEPTION 'lost a race' USING ERRCODE = 'serialization_failure'; END $$`
	run := func(failing int, last error) (runs int, err error) {
		mustExec(t, pool, `TRUNCATE attempts`)
		err = pg.InTxRetried(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			runs++
			if _, err := tx.Exec(ctx, `INSERT INTO attempts VALUES ($1)`, runs); err != nil {
				return err
			}
			if runs <= failing {
				_, err := tx.Exec(ctx, abort)
				return err
			}
			return last
		})
		return runs, err
	}

	runs, err := run(2, nil)
	if err != nil || runs != 3 {
		t.Fatalf("two serialization failures: %d runs, %v; want 3 runs and success", runs, err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts WHERE run = 3`); n != 1 || queryInt(t, pool, `SELECT count(*) FROM attempts`) != 1 {
		t.Fatalf("rows after the third run: want only the third run's")
	}

	runs, err = run(10, nil)
	if !pg.IsSerializationFailure(err) || runs != 5 {
		t.Fatalf("failing every time: %d runs, %v; want 5 runs and the serialization failure", runs, err)
	}

	sentinel := errors.New("sentinel")
	runs, err = run(0, sentinel)
	if !errors.Is(err, sentinel) || runs != 1 {
		t.Fatalf("fn's own error: %d runs, %v; want 1 run and fn's error", runs, err)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM attempts`); n != 0 {
		t.Fatalf("%d rows after fn's own error, want none", n)
	}
}
