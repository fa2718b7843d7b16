package domain

// The priorities the design names (1 is the highest of 1–10).
const (
	PriorityUrgent = 1 // 紧急
	PriorityHigh   = 3 // 高
)

// PreemptsByPriority reports whether a waiting task of priority preemptor
// may take the slot of running work of priority victim, under the priority
// gap the scheduler is configured with (docs/api/tasks.md, "Preemption by
// priority"): a victim at least gap levels lower, or, whatever the gap, an
// urgent task (1) over high-priority work (3) or anything lower, as the
// design's table of preemptions lists 3 → 1. A gap of 0 or less turns
// preemption off.
func PreemptsByPriority(preemptor, victim, gap int) bool {
	if gap <= 0 {
		return false
	}
	return victim-preemptor >= gap || (preemptor == PriorityUrgent && victim >= PriorityHigh)
}
