package chaos

import (
	"strings"
	"testing"
	"time"
)

func TestStallLogCountsLateWakeUpsAndNamesTheLongest(t *testing.T) {
	var l stallLog
	if got := l.summary(); !strings.HasPrefix(got, "no stall") {
		t.Errorf("empty log: %q", got)
	}
	t0 := time.Date(2026, 1, 1, 5, 10, 0, 0, time.UTC)
	l.observe(t0, t0.Add(20*time.Millisecond))                                     // on time
	l.observe(t0, t0.Add(stallReported-time.Millisecond))                          // late, under the bar
	l.observe(t0.Add(time.Second), t0.Add(time.Second+700*time.Millisecond))       // a stall
	l.observe(t0.Add(47*time.Second), t0.Add(49*time.Second+900*time.Millisecond)) // the longest
	got := l.summary()
	want := "2 stalls of 500ms or more seen; the longest 2.9s, ending at 05:10:49.900"
	if got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}
