package pg_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

func TestIsUniqueViolation(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	mustExec(t, pool, `CREATE TABLE keys (k text CONSTRAINT keys_k_unique UNIQUE, other text CONSTRAINT keys_other_check CHECK (other <> 'bad'))`)
	mustExec(t, pool, `INSERT INTO keys VALUES ('a', 'x')`)
	_, dup := pool.Exec(testCtx(t), `INSERT INTO keys VALUES ('a', 'y')`)
	_, check := pool.Exec(testCtx(t), `INSERT INTO keys VALUES ('b', 'bad')`)
	for _, c := range []struct {
		err        error
		constraint string
		want       bool
	}{
		{dup, "", true},
		{dup, "keys_k_unique", true},
		{fmt.Errorf("insert key: %w", dup), "keys_k_unique", true},
		{dup, "some_other_constraint", false},
		{check, "", false},
		{errors.New("23505"), "", false},
		{nil, "", false},
	} {
		if got := pg.IsUniqueViolation(c.err, c.constraint); got != c.want {
			t.Errorf("IsUniqueViolation(%v, %q) = %v, want %v", c.err, c.constraint, got, c.want)
		}
	}
}

func TestIsSerializationFailure(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	mustExec(t, pool, `CREATE TABLE accounts (id int PRIMARY KEY, balance int)`)
	mustExec(t, pool, `INSERT INTO accounts VALUES (1, 100), (2, 100)`)
	ctx := testCtx(t)

	// 40001: a repeatable-read transaction updates a row another
	// transaction changed after its snapshot was taken.
	serialization := pg.InTx(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var b int
		if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&b); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `UPDATE accounts SET balance = 0 WHERE id = 1`); err != nil {
			t.Fatal(err)
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = $1 WHERE id = 1`, b+1)
		return err
	})
	if !pg.IsSerializationFailure(serialization) {
		t.Errorf("IsSerializationFailure(%v) = false", serialization)
	}

	// 40P01: two transactions lock the same rows in opposite orders.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	var held sync.WaitGroup // both hold their first row
	held.Add(2)
	for i, order := range [][2]int{{1, 2}, {2, 1}} {
		wg.Go(func() {
			errs[i] = pg.InTx(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
				// Detect the deadlock quickly instead of after the default 1 s.
				if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '20ms'`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, order[0])
				held.Done()
				held.Wait()
				if err != nil {
					return err
				}
				_, err = tx.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, order[1])
				return err
			})
		})
	}
	wg.Wait()
	deadlocks := 0
	for _, err := range errs {
		if pg.IsSerializationFailure(err) {
			deadlocks++
		} else if err != nil {
			t.Errorf("unexpected error: %v", err)
		}
	}
	if deadlocks != 1 {
		t.Errorf("%d of the two transactions reported a deadlock as a serialization failure, want 1 (errors %v)", deadlocks, errs)
	}

	for _, err := range []error{nil, errors.New("40001"), context.Canceled} {
		if pg.IsSerializationFailure(err) {
			t.Errorf("IsSerializationFailure(%v) = true", err)
		}
	}
}

// Errors about the data are not transient; errors about the connection,
// the transaction's luck or the caller's context are.
func TestIsTransient(t *testing.T) {
	pool := pgtest.New(t).Open(t, "")
	mustExec(t, pool, `CREATE TABLE texts (s text)`)
	_, nul := pool.Exec(testCtx(t), `INSERT INTO texts VALUES ($1)`, "x\x00")
	_, syntax := pool.Exec(testCtx(t), `SELEC 1`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, ctxErr := pool.Exec(ctx, `SELECT 1`)
	_, timeout := pool.Exec(testCtx(t), `SET statement_timeout = 1; SELECT pg_sleep(1)`)
	// A backend killed mid-query, as a server stopped with -m immediate
	// does to every session.
	killed := func() error {
		conn, err := pool.Acquire(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		var pid int
		if err := conn.QueryRow(testCtx(t), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			_, _ = pool.Exec(testCtx(t), `SELECT pg_terminate_backend($1)`, pid)
		}()
		_, err = conn.Exec(testCtx(t), `SELECT pg_sleep(30)`)
		return err
	}()
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"NUL in a text column", nul, false},
		{"syntax error", syntax, false},
		{"plain error", errors.New("decode: bad record"), false},
		{"cancelled context", ctxErr, true},
		{"statement timeout (57014)", timeout, true},
		{"wrapped serialization failure", fmt.Errorf("apply: %w", &pgconn.PgError{Code: "40001"}), true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"lock not available", &pgconn.PgError{Code: "55P03"}, true},
		{"backend terminated mid-query", killed, true},
		{"server gone mid-read (pgx's unexpected EOF)", fmt.Errorf("write tasks: %w", io.ErrUnexpectedEOF), true},
	} {
		if c.name == "cancelled context" && c.err == nil {
			t.Fatal("a cancelled context ran the statement")
		}
		if got := pg.IsTransient(c.err); got != c.want {
			t.Errorf("%s: IsTransient(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
