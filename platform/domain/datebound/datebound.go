// Package datebound reads the date and time bounds of the read APIs by one
// rule: a date (YYYY-MM-DD, UTC) or an RFC 3339 time. The audit log's and
// usage reports' from and to (docs/api/audit.md, docs/api/usage.md) and
// the task list's created_after and created_before (docs/api/tasks.md)
// read their values here, so a date means the same day everywhere. It is
// pure, and sits under platform/domain so that every service reads bounds
// by the one rule.
package datebound

import (
	"fmt"
	"strings"
	"time"
)

// Parse reads a bound: "" is unbounded (the zero time); YYYY-MM-DD is the
// start of that day (UTC) or, for an upper bound, the start of the next
// day, so that "to" includes its whole day; an RFC 3339 time is itself,
// in UTC. Upper bounds are returned exclusive: an upper time includes
// itself to the microsecond, the precision times are stored with.
func Parse(s string, upper bool) (time.Time, error) {
	t, day, err := read(s)
	switch {
	case err != nil || t.IsZero() || !upper:
		return t, err
	case day:
		return t.AddDate(0, 0, 1), nil
	}
	// Stored times have microseconds: the next one bounds from above.
	return t.Truncate(time.Microsecond).Add(time.Microsecond), nil
}

// ParseBefore reads an upper bound whose time is exclusive (the task
// list's created_before): "" is unbounded, an RFC 3339 time is itself, in
// UTC, and YYYY-MM-DD includes its whole day as Parse's upper bound does,
// so it is the start of the next day (UTC).
func ParseBefore(s string) (time.Time, error) {
	t, day, err := read(s)
	if err == nil && day {
		t = t.AddDate(0, 0, 1)
	}
	return t, err
}

// read reads s as a date (day true: its start, UTC) or an RFC 3339 time
// (in UTC); "" (or blanks) is the zero time.
func read(s string) (t time.Time, day bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, false, nil
	}
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		return d, true, nil
	}
	t, err = time.Parse(time.RFC3339Nano, s)
	if err != nil {
		// A query string decodes a bare "+" as a space, so
		// created_after=2026-11-22T10:00:00+08:00 sent unescaped arrives
		// as "…T10:00:00 08:00". A space can stand nowhere else in an
		// RFC 3339 time, so it is read back as the offset's sign.
		if i := strings.LastIndexByte(s, ' '); i > 0 && offsetDigits(s[i+1:]) {
			t, err = time.Parse(time.RFC3339Nano, s[:i]+"+"+s[i+1:])
		}
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%q is neither YYYY-MM-DD nor an RFC 3339 time", s)
	}
	return t.UTC(), false, nil
}

// offsetDigits reports whether s is an offset's digits without its sign:
// HH:MM.
func offsetDigits(s string) bool {
	if len(s) != 5 || s[2] != ':' {
		return false
	}
	for i, c := range []byte(s) {
		if i != 2 && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
