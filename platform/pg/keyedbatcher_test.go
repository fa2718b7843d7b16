package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

// counterStore keeps int counters in kb.counters and logs each change as
// an event row, so tests can check state and events agree.
type counterStore struct {
	saves    atomic.Int64
	failNext atomic.Int64 // fail this many Saves with errRetry
}

var errRetry = errors.New("conflict, try again")

func (s *counterStore) Lock(keys []string) (string, []any, func(pgx.Rows) (map[string]int, error)) {
	return `SELECT id, n FROM kb.counters WHERE id = ANY($1) ORDER BY id FOR UPDATE`, []any{keys},
		func(rows pgx.Rows) (map[string]int, error) {
			out := map[string]int{}
			var (
				id string
				n  int
			)
			_, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil })
			return out, err
		}
}

func (s *counterStore) Queue(b *pgx.Batch, changes []pg.KeyedChange[int, string]) (func(error) error, error) {
	if s.failNext.Load() > 0 {
		s.failNext.Add(-1)
		// A statement that fails when the batch runs, mapped to errRetry.
		b.Queue(`SELECT 1/0`)
		return func(error) error { return errRetry }, nil
	}
	s.saves.Add(1)
	for _, c := range changes {
		b.Queue(`INSERT INTO kb.counters (id, n) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n`, c.Key, c.After)
		for _, e := range c.Events {
			b.Queue(`INSERT INTO kb.events (id, what) VALUES ($1, $2)`, c.Key, e)
		}
	}
	return func(err error) error { return err }, nil
}

func TestKeyedBatcher(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.New(t).Open(t, "kb")
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS kb; CREATE TABLE kb.counters (id text PRIMARY KEY, n int NOT NULL);
		CREATE TABLE kb.events (seq bigint GENERATED ALWAYS AS IDENTITY, id text, what text)`); err != nil {
		t.Fatal(err)
	}
	store := &counterStore{}
	var commits atomic.Int64
	b := pg.NewKeyedBatcher[int, string](pool, store, pg.KeyedBatcherOptions{Workers: 2, MaxBatch: 64,
		Retryable: func(err error) bool { return errors.Is(err, errRetry) }, AfterCommit: func() { commits.Add(1) }})
	defer b.Close()

	refuse := errors.New("would go negative")
	incr := func(by int) pg.Decide[int, string] {
		return func(n int, _ bool) (int, []string, error) {
			if n+by < 0 {
				return n, nil, refuse
			}
			return n + by, []string{fmt.Sprintf("%+d", by)}, nil
		}
	}
	const keys, per = 20, 60
	var wg sync.WaitGroup
	var refused atomic.Int64
	for k := 0; k < keys; k++ {
		for i := 0; i < per; i++ {
			wg.Add(1)
			go func(key string, i int) {
				defer wg.Done()
				by := 1
				if i%6 == 5 {
					by = -1000 // always refused: counters never reach 1000
				}
				_, err := b.Do(ctx, key, incr(by))
				switch {
				case errors.Is(err, refuse):
					refused.Add(1)
				case err != nil:
					t.Error(err)
				}
			}(fmt.Sprint("k", k), i)
		}
	}
	wg.Wait()
	want := per - per/6
	rows, err := pool.Query(ctx, `SELECT c.id, c.n, (SELECT count(*) FROM kb.events e WHERE e.id = c.id) FROM kb.counters c`)
	if err != nil {
		t.Fatal(err)
	}
	var (
		id      string
		n, evts int
		seen    int
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &n, &evts}, func() error {
		seen++
		if n != want || evts != want {
			t.Errorf("%s: n=%d events=%d, want %d", id, n, evts, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen != keys || refused.Load() != int64(keys*(per/6)) {
		t.Fatalf("keys %d, refused %d", seen, refused.Load())
	}
	if commits.Load() >= int64(keys*want) {
		t.Errorf("%d commits for %d changes: nothing batched", commits.Load(), keys*want)
	}
	t.Logf("%d changes in %d commits", keys*want, commits.Load())

	// A batch whose Save fails with a retryable error is decided again.
	store.failNext.Store(2)
	got, err := b.Do(ctx, "k0", incr(1))
	if err != nil || got != want+1 {
		t.Fatalf("after retries: %d, %v", got, err)
	}
	// A non-retryable failure reaches the command, and nothing is stored.
	store.failNext.Store(10)
	if _, err := b.Do(ctx, "k0", incr(1)); !errors.Is(err, errRetry) {
		t.Fatalf("err = %v", err)
	}
	store.failNext.Store(0)
	var n0 int
	if err := pool.QueryRow(ctx, `SELECT n FROM kb.counters WHERE id = 'k0'`).Scan(&n0); err != nil || n0 != want+1 {
		t.Fatalf("k0 = %d, %v", n0, err)
	}
	// A panicking decision fails alone.
	if _, err := b.Do(ctx, "k1", func(int, bool) (int, []string, error) { panic("boom") }); err == nil {
		t.Fatal("panic not reported")
	}
}
