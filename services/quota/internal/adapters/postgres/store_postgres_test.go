package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/quota/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/quota/internal/app/apptest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		return pg.Migrate(ctx, pool, quota.Schema, quota.Migrations()...)
	}))
}

// The Postgres store keeps the contract the use cases' fake keeps, each
// case on a database of its own.
func TestStoreKeepsTheContract(t *testing.T) {
	apptest.StoreContract(t, func(t *testing.T) apptest.ContractStore {
		pool, err := pg.Open(context.Background(), pg.Config{URL: pgtest.New(t).URL, Schema: quota.Schema, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return postgres.NewStore(pool, nil)
	})
}
