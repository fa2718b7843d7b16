// Package datebound reads the from and to bounds of the consumers' read
// APIs (the audit log, usage reports) by one rule, documented in
// docs/api/audit.md and docs/api/usage.md: a date (YYYY-MM-DD, UTC) or an
// RFC 3339 time. It is pure.
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
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if upper {
			d = d.AddDate(0, 0, 1)
		}
		return d, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither YYYY-MM-DD nor an RFC 3339 time", s)
	}
	t = t.UTC()
	if upper {
		// Stored times have microseconds: the next one bounds from above.
		t = t.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	return t, nil
}
