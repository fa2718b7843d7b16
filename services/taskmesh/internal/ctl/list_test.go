package ctl

import (
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/datebound"
)

// --since and --until read dates and times as the API's created_after and
// created_before do (a day given to --until is included whole), and a
// duration as that long before now.
func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	cases := []struct {
		in    string
		bound func(string) (time.Time, error)
		want  time.Time
	}{
		{"2026-11-20", sinceBound, time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)},
		{"2026-11-20", datebound.ParseBefore, time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)},
		{"2026-11-20T12:00:00+08:00", sinceBound, time.Date(2026, 11, 20, 4, 0, 0, 0, time.UTC)},
		{"2026-11-20T12:00:00Z", datebound.ParseBefore, time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)},
		{"90m", sinceBound, now.Add(-90 * time.Minute)},
		{"7d", datebound.ParseBefore, now.AddDate(0, 0, -7)},
	}
	for _, c := range cases {
		got, err := parseWhen(c.in, now, c.bound)
		if err != nil || !got.AsTime().Equal(c.want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v", c.in, got.AsTime(), err, c.want)
		}
	}
	if got, err := parseWhen("", now, sinceBound); got != nil || err != nil {
		t.Errorf("no bound = %v, %v", got, err)
	}
	for _, bad := range []string{"yesterday", "2026-13-01", "-3d", "-1h", "xd"} {
		if _, err := parseWhen(bad, now, sinceBound); err == nil || !strings.Contains(err.Error(), "neither a date") {
			t.Errorf("parseWhen(%q): %v, want it refused", bad, err)
		}
	}
}
