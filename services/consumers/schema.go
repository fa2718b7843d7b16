package consumers

import (
	"embed"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Schema is the consumers service's default Postgres schema.
const Schema = "consumers"

// Migrations are the consumers schema's: the offsets and dead letters its
// consumers share (platform/projection), and its read models.
func Migrations() []pg.MigrationSet {
	own, err := pg.LoadMigrations("consumers", migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	return []pg.MigrationSet{projection.Migrations(), own}
}
