package datebound

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	cases := []struct {
		in    string
		upper bool
		want  time.Time
	}{
		{"", false, time.Time{}},
		{"  ", true, time.Time{}},
		{"2026-11-20", false, day(2026, 11, 20)},
		{"2026-11-20", true, day(2026, 11, 21)},
		{"2026-12-31", true, day(2027, 1, 1)},
		{"2026-11-22T10:00:00+01:00", false, time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)},
		{"2026-11-22T12:00:00.0000005Z", true, time.Date(2026, 11, 22, 12, 0, 0, 1000, time.UTC)},
		{" 2026-11-20 ", false, day(2026, 11, 20)},
		// A "+" sent unescaped in a query string arrives as a space.
		{"2026-11-22T10:00:00 01:00", false, time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)},
		{"2026-11-22T10:00:00.5 08:00", false, time.Date(2026, 11, 22, 2, 0, 0, 5e8, time.UTC)},
	}
	for _, c := range cases {
		got, err := Parse(c.in, c.upper)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("Parse(%q, upper %v) = %v, %v; want %v", c.in, c.upper, got, err, c.want)
		}
		if err == nil && !got.IsZero() && got.Location() != time.UTC {
			t.Errorf("Parse(%q) in %v, want UTC", c.in, got.Location())
		}
	}
	for _, bad := range []string{"2026-13-01", "yesterday", "2026-11-20 10:00", "1732000000",
		"2026-11-22T10:00:00 1:00", "2026-11-22T10:00:00 08:0a", "2026-11-22 10:00:00 08:00"} {
		if _, err := Parse(bad, false); err == nil || !strings.Contains(err.Error(), "neither YYYY-MM-DD nor an RFC 3339 time") {
			t.Errorf("Parse(%q): %v, want the format refused", bad, err)
		}
	}
}

// ParseBefore is the exclusive upper bound: a time excludes itself, a date
// still includes its whole day.
func TestParseBefore(t *testing.T) {
	cases := []struct {
		in   string
		want time.Time
	}{
		{"", time.Time{}},
		{"2024-01-31", time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"2024-12-31", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2024-01-31T12:00:00.0000005Z", time.Date(2024, 1, 31, 12, 0, 0, 500, time.UTC)},
		{"2024-01-31T12:00:00+08:00", time.Date(2024, 1, 31, 4, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		got, err := ParseBefore(c.in)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseBefore(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"2024-02-30", "31/01/2024", "2024-01-31T25:00:00Z"} {
		if _, err := ParseBefore(bad); err == nil || !strings.Contains(err.Error(), "neither YYYY-MM-DD nor an RFC 3339 time") {
			t.Errorf("ParseBefore(%q): %v, want the format refused", bad, err)
		}
	}
}
