package pg

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CollectDocs decodes rows of one document column (a JSON doc) into Ts
// with decode, in row order, and closes rows. what names the documents
// in errors ("task doc"). No rows is a nil slice.
func CollectDocs[T any](rows pgx.Rows, what string, decode func(doc []byte, v *T) error) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		var v T
		if err := decode(doc, &v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", what, err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
