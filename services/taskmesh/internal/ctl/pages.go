package ctl

import (
	"fmt"
	"io"
)

// collectPages reads a list page by page: list answers the items of the
// page at token and the next page's token ("" after the last). Without all
// it stops after the first page. It returns the items read and the token
// of the first page not read, so a table can say that more remain and
// --output json can carry the token on.
func collectPages[T any](all bool, list func(token string) ([]T, string, error)) ([]T, string, error) {
	var items []T
	token := ""
	for {
		page, next, err := list(token)
		if err != nil {
			return nil, "", err
		}
		items = append(items, page...)
		if !all || next == "" {
			return items, next, nil
		}
		token = next
	}
}

// writeMore tells, on w (standard error, so that the table piped on
// stays a table), that a list has pages left unread, naming what it lists.
func writeMore(w io.Writer, next, what string) error {
	if next == "" {
		return nil
	}
	_, err := fmt.Fprintf(w, "note: more %s match; use --all to list them all\n", what)
	return err
}
