package postgres

import (
	gojson "github.com/goccy/go-json"
	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// collectDocs decodes rows of one JSON document column (the doc column of
// task groups, templates, managed services) into Ts, in row order, and
// closes rows. what names the documents in errors ("template").
func collectDocs[T any](rows pgx.Rows, what string) ([]T, error) {
	return pg.CollectDocs(rows, what, func(doc []byte, v *T) error { return gojson.Unmarshal(doc, v) })
}
