package ctl

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// book is a list of three pages as a server answers it: the items of the
// page at a token and the next page's token.
func book(calls *[]string) func(string) ([]int, string, error) {
	pages := map[string]struct {
		items []int
		next  string
	}{"": {[]int{1, 2}, "p2"}, "p2": {[]int{3}, "p3"}, "p3": {[]int{4, 5}, ""}}
	return func(token string) ([]int, string, error) {
		*calls = append(*calls, token)
		p, ok := pages[token]
		if !ok {
			return nil, "", errors.New("unknown page token " + token)
		}
		return p.items, p.next, nil
	}
}

func TestCollectPagesReadsTheFirstPageOrAll(t *testing.T) {
	var calls []string
	items, next, err := collectPages(false, book(&calls))
	if err != nil || !slices.Equal(items, []int{1, 2}) || next != "p2" || !slices.Equal(calls, []string{""}) {
		t.Fatalf("first page: items %v next %q err %v calls %q", items, next, err, calls)
	}
	calls = nil
	items, next, err = collectPages(true, book(&calls))
	if err != nil || !slices.Equal(items, []int{1, 2, 3, 4, 5}) || next != "" || !slices.Equal(calls, []string{"", "p2", "p3"}) {
		t.Fatalf("all pages: items %v next %q err %v calls %q", items, next, err, calls)
	}
}

func TestCollectPagesStopsAtAnError(t *testing.T) {
	failing := func(token string) ([]int, string, error) {
		if token == "p2" {
			return nil, "", errors.New("unavailable")
		}
		return []int{1}, "p2", nil
	}
	items, next, err := collectPages(true, failing)
	if err == nil || err.Error() != "unavailable" || items != nil || next != "" {
		t.Fatalf("items %v next %q err %v, want the error and nothing else", items, next, err)
	}
}

func TestWriteMoreOnlyWhenPagesRemain(t *testing.T) {
	var b bytes.Buffer
	if err := writeMore(&b, "", "tenants"); err != nil || b.Len() != 0 {
		t.Fatalf("no pages left: wrote %q (err %v)", b.String(), err)
	}
	if err := writeMore(&b, "p2", "tenants"); err != nil || b.String() != "note: more tenants match; use --all to list them all\n" {
		t.Fatalf("pages left: wrote %q (err %v)", b.String(), err)
	}
}
