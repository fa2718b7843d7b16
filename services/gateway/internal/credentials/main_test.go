package credentials

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
)

const schema = "gateway"

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, schema, eventstore.Migrations(), Migrations())
	}))
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// logBuffer collects log output from concurrent goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type fixture struct {
	store *Store
	clock *clock
	logs  *logBuffer
	db    *pgxpool.Pool
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	db := pgtest.New(t).Open(t, schema)
	c := &clock{t: time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC)}
	logs := &logBuffer{}
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
