package credentials

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/logbuf"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

const schema = "gateway"

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, schema, eventstore.Migrations(), Migrations())
	}))
}

type fixture struct {
	store *Store
	clock *clocktest.Fixed
	logs  *logbuf.Buffer
	db    *pgxpool.Pool
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	db := pgtest.New(t).Open(t, schema)
	c := clocktest.NewFixed(time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC))
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return fixture{store: New(db, c.Now, log), clock: c, logs: logs, db: db}
}

func (f fixture) tenant(t *testing.T, id, tier string) Tenant {
	t.Helper()
	tn, err := f.store.CreateTenant(context.Background(), id, "Tenant "+id, tier)
	if err != nil {
		t.Fatalf("CreateTenant(%q): %v", id, err)
	}
	return tn
}

// concurrently runs fn(0) … fn(n-1) from 8 goroutines at once and reports
// every error.
func concurrently(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				if err := fn(i); err != nil {
					errs <- fmt.Errorf("call %d: %w", i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// wantVersions checks that the aggregate has events 1 to n, one each.
func (f fixture) wantVersions(t *testing.T, aggregateID string, n int64) {
	t.Helper()
	var count, maxVersion int64
	if err := f.db.QueryRow(context.Background(), `SELECT count(*), coalesce(max(version), 0) FROM events WHERE aggregate_id = $1`,
		aggregateID).Scan(&count, &maxVersion); err != nil {
		t.Fatal(err)
	}
	if count != n || maxVersion != n {
		t.Errorf("%s has %d events up to version %d, want %d", aggregateID, count, maxVersion, n)
	}
}
