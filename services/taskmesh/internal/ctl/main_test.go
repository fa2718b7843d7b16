package ctl

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

// TestMain migrates the services' schemas once into pgtest's template;
// each integration test then gets a clone (see newStack). Unit tests
// never start PostgreSQL.
func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.WithMigrations(func(ctx context.Context, pool *pgxpool.Pool) error {
		if err := pg.Migrate(ctx, pool, scheduler.Schema, scheduler.Migrations()...); err != nil {
			return err
		}
		if err := pg.Migrate(ctx, pool, quota.Schema, quota.Migrations()...); err != nil {
			return err
		}
		return pg.Migrate(ctx, pool, gatewaySchema, gateway.Migrations()...)
	}))
}
