package postgres

import (
	"fmt"

	gojson "github.com/goccy/go-json"
	"github.com/jackc/pgx/v5"
)

// collectDocs decodes rows of one JSON document column (the doc column of
// task groups, templates, managed services) into Ts, in row order, and
// closes rows. what names the documents in errors ("template").
func collectDocs[T any](rows pgx.Rows, what string) ([]T, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) {
		var v T
		var doc []byte
		if err := row.Scan(&doc); err != nil {
			return v, fmt.Errorf("read %s: %w", what, err)
		}
		if err := gojson.Unmarshal(doc, &v); err != nil {
			return v, fmt.Errorf("decode %s: %w", what, err)
		}
		return v, nil
	})
}
