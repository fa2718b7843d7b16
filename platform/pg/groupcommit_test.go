package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

func TestGroupCommitterBatchesAndIsolatesFailures(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, "gc")
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS gc; CREATE TABLE gc.rows (id text PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var commits atomic.Int64
	g := pg.NewGroupCommitter(pool, pg.GroupCommitOptions{Workers: 2, MaxBatch: 16, AfterCommit: func() { commits.Add(1) }})
	defer g.Close()

	boom := errors.New("domain says no")
	const n = 400
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = g.Do(ctx, fmt.Sprint(i%37), func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO gc.rows (id, n) VALUES ($1, $2)`, fmt.Sprint(i), i); err != nil {
					return err
				}
				switch {
				case i%10 == 3: // fails after writing: its row must not survive
					return boom
				case i%10 == 7: // a database error aborts the transaction
					_, err := tx.Exec(ctx, `INSERT INTO gc.rows (id, n) VALUES ($1, 0)`, fmt.Sprint(i))
					return err
				case i%50 == 11:
					panic("bad command")
				}
				return nil
			})
		}(i)
	}
	wg.Wait()

	want := 0
	for i, err := range errs {
		switch {
		case i%10 == 3:
			if !errors.Is(err, boom) {
				t.Errorf("command %d: err = %v, want its own error", i, err)
			}
		case i%10 == 7:
			if !pg.IsUniqueViolation(err, "") {
				t.Errorf("command %d: err = %v, want unique violation", i, err)
			}
		case i%50 == 11:
			if err == nil {
				t.Errorf("command %d: panic not reported", i)
			}
		default:
			want++
			if err != nil {
				t.Errorf("command %d: %v", i, err)
			}
		}
	}
	var got int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM gc.rows`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("%d rows stored, want %d (failed commands must leave nothing)", got, want)
	}
	if c := commits.Load(); c >= int64(want) {
		t.Errorf("%d commits for %d commands: nothing was batched", c, want)
	}
	t.Logf("%d commands in %d commits", want, commits.Load())
}

func TestGroupCommitterKeepsPerKeyOrder(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, "gc")
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS gc; CREATE TABLE gc.log (key text, seq int, at bigint GENERATED ALWAYS AS IDENTITY)`); err != nil {
		t.Fatal(err)
	}
	g := pg.NewGroupCommitter(pool, pg.GroupCommitOptions{Workers: 3})
	defer g.Close()
	var wg sync.WaitGroup
	for k := 0; k < 5; k++ {
		wg.Add(1)
		go func(key string) {
			defer wg.Done()
			for seq := 0; seq < 50; seq++ {
				err := g.Do(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO gc.log (key, seq) VALUES ($1, $2)`, key, seq)
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}
		}(fmt.Sprint("k", k))
	}
	wg.Wait()
	var disorder int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT seq < lag(seq) OVER (PARTITION BY key ORDER BY at) AS back FROM gc.log) x WHERE back`).Scan(&disorder); err != nil {
		t.Fatal(err)
	}
	if disorder != 0 {
		t.Fatalf("%d commands ran out of submission order within their key", disorder)
	}
}

func TestGroupCommitterContextAndClose(t *testing.T) {
	pool := pgtest.New(t).Open(t, "gc")
	g := pg.NewGroupCommitter(pool, pg.GroupCommitOptions{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := g.Do(cancelled, "k", func(context.Context, pgx.Tx) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("cancelled command: err = %v, ran = %v", err, ran)
	}
	g.Close()
	if err := g.Do(context.Background(), "k", func(context.Context, pgx.Tx) error { return nil }); !errors.Is(err, pg.ErrCommitterClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// A batch aborted by a deadlock is no command's own failure: the
// committer runs it again, and the command commits once.
func TestGroupCommitterRerunsABatchAbortedByADeadlock(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, "gc")
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS gc; CREATE TABLE gc.dl (id text PRIMARY KEY, n int NOT NULL);
		INSERT INTO gc.dl VALUES ('a', 0), ('b', 0)`); err != nil {
		t.Fatal(err)
	}
	g := pg.NewGroupCommitter(pool, pg.GroupCommitOptions{Workers: 1})
	defer g.Close()
	aLocked, bLocked, otherCommitted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var otherEnded sync.Once
	endOther := func() { otherEnded.Do(func() { close(otherCommitted) }) }
	defer endOther() // before g.Close: a failed test must not leave the rerun waiting
	var attempts atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- g.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
			first := attempts.Add(1) == 1
			if !first {
				// The rerun waits for the other transaction to end. Were it
				// to take a's row lock before the other, woken by the abort,
				// took it, the two would deadlock again over b, and the test
				// would measure the scheduler instead of the committer.
				<-otherCommitted
			}
			if _, err := tx.Exec(ctx, `UPDATE gc.dl SET n = n + 1 WHERE id = 'a'`); err != nil {
				return err
			}
			if first {
				close(aLocked)
				<-bLocked
			}
			_, err := tx.Exec(ctx, `UPDATE gc.dl SET n = n + 1 WHERE id = 'b'`)
			return err
		})
	}()
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	<-aLocked
	if _, err := other.Exec(ctx, `UPDATE gc.dl SET n = n + 100 WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	close(bLocked)
	// The command waits for b first, so its deadlock check fires first
	// and its transaction is the one aborted.
	time.Sleep(200 * time.Millisecond)
	if _, err := other.Exec(ctx, `UPDATE gc.dl SET n = n + 100 WHERE id = 'a'`); err != nil {
		t.Fatalf("the other transaction was the one aborted: %v", err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	endOther()
	if err := <-done; err != nil {
		t.Fatalf("the command failed with its batch's deadlock: %v", err)
	}
	if n := attempts.Load(); n != 2 {
		t.Fatalf("the command ran %d times, want 2 (aborted once, then committed)", n)
	}
	var a, b int
	if err := pool.QueryRow(ctx, `SELECT (SELECT n FROM gc.dl WHERE id = 'a'), (SELECT n FROM gc.dl WHERE id = 'b')`).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	if a != 101 || b != 101 {
		t.Fatalf("a = %d, b = %d, want 101 each: both transactions once", a, b)
	}
}
