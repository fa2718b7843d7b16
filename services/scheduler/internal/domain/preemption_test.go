package domain

import "testing"

// The design's table of preemptions, with the default gap of 3: 5 → 1 and
// 3 → 1 preempt, 1 → 1 does not, and a gap under 3 does not unless the
// preemptor is urgent and the victim of high priority or lower.
func TestPreemptsByPriority(t *testing.T) {
	for _, c := range []struct {
		preemptor, victim, gap int
		want                   bool
	}{
		{1, 5, 3, true},  // 普通 ← 紧急
		{1, 3, 3, true},  // 高 ← 紧急: the table's row, though the gap is 2
		{1, 1, 3, false}, // 紧急 ← 紧急
		{1, 2, 3, false}, // a gap of 1, and the victim outranks high
		{2, 4, 3, false}, // a gap under 3, and not urgent
		{3, 5, 3, false},
		{2, 5, 3, true}, // a gap of 3
		{7, 10, 3, true},
		{1, 10, 3, true},
		{1, 3, 5, true}, // urgent over high whatever the gap
		{2, 6, 5, false},
		{1, 5, 0, false}, // preemption off
		{1, 5, -1, false},
		{5, 1, 3, false}, // never upwards
	} {
		if got := PreemptsByPriority(c.preemptor, c.victim, c.gap); got != c.want {
			t.Errorf("PreemptsByPriority(%d, %d, gap %d) = %v, want %v", c.preemptor, c.victim, c.gap, got, c.want)
		}
	}
}
