package domain

import (
	"cmp"
	"maps"
	"slices"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Mode is how a group runs its members.
type Mode string

const (
	ModeSerial   Mode = "serial"
	ModeParallel Mode = "parallel"
	ModeDAG      Mode = "dag"
	ModeRepeat   Mode = "repeat"
)

// Status is a group's lifecycle state.
type Status string

const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Final reports whether the group has ended.
func (s Status) Final() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Group is the aggregate's state without its members: what the group row
// holds.
type Group struct {
	ID        string `json:"id"`
	TenantID  string `json:"tenant_id"`
	CreatedBy string `json:"created_by,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	Name      string `json:"name"`
	Mode      Mode   `json:"mode"`
	Status    Status `json:"status"`
	// MaxParallel bounds the open members of a parallel group (0: none).
	MaxParallel int     `json:"max_parallel,omitempty"`
	Repeat      *Repeat `json:"repeat,omitempty"`
	// Webhook is the group's own endpoint ("" the tenant's default), shown
	// by GetTaskGroup; the consumers read it from TaskGroupCreated.
	Webhook string `json:"webhook,omitempty"`
	// Total is the number of members (a repeat: run attempts released).
	Total  int                 `json:"total"`
	Counts map[task.Status]int `json:"counts"`
	// Reason says why the group failed or was cancelled.
	Reason string `json:"reason,omitempty"`
	// FailedMembers are the members whose task failed (not a repeat's
	// runs), the first maxFailedMembers of them.
	FailedMembers []string `json:"failed_members,omitempty"`
	Deleted       bool     `json:"deleted,omitempty"`
	Version       int64    `json:"version"`

	CreatedAt time.Time `json:"created_at"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at"`
}

// maxFailedMembers bounds Group.FailedMembers.
const maxFailedMembers = 100

func (g *Group) failed(key string) {
	if len(g.FailedMembers) < maxFailedMembers {
		g.FailedMembers = append(g.FailedMembers, key)
	}
}

// Open counts the members that are not final.
func (g Group) Open() int {
	n := 0
	for s, c := range g.Counts {
		if !s.Final() {
			n += c
		}
	}
	return n
}

// Repeat is a repeat's policy (docs/api/task-groups.md#repeat-policy) and
// where it stands.
type Repeat struct {
	Count       int `json:"count"`
	Parallel    int `json:"parallel"`
	IntervalSec int `json:"interval_sec"`
	// MaxFailures is how many failed runs the repeat tolerates: one more
	// ends it failed (0: it never fails for its failures).
	MaxFailures int `json:"max_failures"`
	BackoffSec  int `json:"backoff_sec"`
	// Threshold failures in a row open the breaker (0: no breaker).
	Threshold    int       `json:"circuit_breaker_threshold"`
	Spec         task.Spec `json:"spec"`
	ClusterQueue string    `json:"cluster_queue,omitempty"`

	// Released counts runs started for the first time (run numbers
	// 1…Released are taken).
	Released            int       `json:"released"`
	Completed           int       `json:"completed"`
	Failures            int       `json:"failures"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	CircuitOpen         bool      `json:"circuit_open,omitempty"`
	LastStartAt         time.Time `json:"last_start_at,omitzero"`
	// Retries are failed runs waiting for their next attempt.
	Retries     []Retry   `json:"retries,omitempty"`
	ResetBy     string    `json:"reset_by,omitempty"`
	ResetReason string    `json:"reset_reason,omitempty"`
	ResetAt     time.Time `json:"reset_at,omitzero"`
}

// Retry is a failed run's next attempt, due at DueAt.
type Retry struct {
	Run     int       `json:"run"`
	Attempt int       `json:"attempt"`
	DueAt   time.Time `json:"due_at"`
}

// Member is one member of a group: before its release a definition, then
// a mirror of its task.
type Member struct {
	Key string `json:"id"`
	// Index orders the members: the position in the definition, for a
	// repeat the order of release.
	Index     int      `json:"index"`
	Name      string   `json:"name"`
	DependsOn []string `json:"depends_on,omitempty"`
	// Spec and ClusterQueue are what the member's task is created from,
	// until it is (empty for repeat runs, made from the group's Repeat).
	Spec         task.Spec `json:"spec,omitzero"`
	ClusterQueue string    `json:"cluster_queue,omitempty"`
	// TaskID is empty until the member is released.
	TaskID string `json:"task_id,omitempty"`
	// PlannedTaskID is the id its task gets at release when that was fixed
	// at creation (MemberDef.TaskID): the member's own id.
	PlannedTaskID string `json:"planned_task_id,omitempty"`
	// Status is the member task's status as last seen; pending before
	// the release.
	Status    task.Status `json:"status"`
	Run       int         `json:"run,omitempty"`
	Attempt   int         `json:"attempt,omitempty"`
	StartedAt time.Time   `json:"started_at,omitzero"`
	EndedAt   time.Time   `json:"ended_at,omitzero"`
	Error     string      `json:"error,omitempty"`
	// Version is the group's version after the member last changed: a
	// watcher asks for the members changed since the version it has.
	Version int64 `json:"version"`
}

// Released reports whether the member has its task.
func (m Member) Released() bool { return m.TaskID != "" }

// State is a group with its members, keyed by member id. A store may load
// only the members that are not final (Scope Open): every command except
// Delete decides from those and the group's counters alone.
type State struct {
	Group   Group
	Members map[string]Member
}

// Clone returns a copy that can be changed without touching s.
func (s State) Clone() State {
	c := State{Group: s.Group, Members: maps.Clone(s.Members)}
	c.Group.Counts = maps.Clone(s.Group.Counts)
	c.Group.FailedMembers = slices.Clone(s.Group.FailedMembers)
	if s.Group.Repeat != nil {
		r := *s.Group.Repeat
		r.Retries = slices.Clone(r.Retries)
		c.Group.Repeat = &r
	}
	if c.Members == nil {
		c.Members = map[string]Member{}
	}
	return c
}

// Ordered returns the loaded members in group order.
func (s State) Ordered() []Member {
	out := make([]Member, 0, len(s.Members))
	for _, m := range s.Members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

// Facts are what the process manager sees of a member's task now.
type Facts struct {
	Status    task.Status
	StartedAt time.Time
	EndedAt   time.Time
	Error     string
	// Gone: the task was deleted, or no longer exists.
	Gone bool
}

// NextWake is when a repeat may start its next run without any member
// changing first: when interval_sec since the last start has passed, or a
// failed run's backoff_sec. Zero when only a member's change can let the
// next run start (all parallel slots taken, a run not yet started while
// runs must be spaced, the breaker open) or nothing is left to start. It
// depends on the state alone, so a store keeps it beside the group and a
// restarted scheduler finds the repeats whose time has come.
func (g Group) NextWake() time.Time {
	r := g.Repeat
	if g.Status != StatusRunning || r == nil || r.CircuitOpen {
		return time.Time{}
	}
	if g.Open() >= r.Parallel || (r.IntervalSec > 0 && g.unstarted() > 0) {
		return time.Time{}
	}
	var ready time.Time // when a run is there to start
	switch {
	case len(r.Retries) > 0:
		// A failed run backs off; nothing starts before it.
		ready = r.Retries[0].DueAt
		for _, rt := range r.Retries[1:] {
			if rt.DueAt.Before(ready) {
				ready = rt.DueAt
			}
		}
	case r.Released < r.Count:
		// A new run is ready at once.
	default:
		return time.Time{}
	}
	if gate := r.spacedFrom(); gate.After(ready) {
		return gate
	}
	return ready
}

// unstarted counts open members that have not started: a pending or
// assigned task.
func (g Group) unstarted() int {
	return g.Counts[task.StatusPending] + g.Counts[task.StatusAssigned]
}

// UnboundedBackoffCap is the longest wait RetryWait puts before a failed
// run of a repeat that nothing stops on failure.
const UnboundedBackoffCap = 5 * time.Minute

// RetryWait is how long a run that just failed waits before it is tried
// again, with ConsecutiveFailures counting that failure: backoff_sec.
// A repeat with neither max_failures nor a breaker is never ended by its
// failures, and with backoff_sec 0 — both the defaults — a run that fails
// at once would be tried again at once, without end, each try a task
// with its events. Such a repeat's failures in a row wait at least 1 s,
// 2 s, 4 s …, doubling up to UnboundedBackoffCap, and a completed run
// resets the pace (decision 0126). A repeat with either limit set is
// bounded by it and keeps backoff_sec as given.
func (r *Repeat) RetryWait() time.Duration {
	wait := time.Duration(r.BackoffSec) * time.Second
	if r.MaxFailures > 0 || r.Threshold > 0 || r.ConsecutiveFailures < 1 {
		return wait
	}
	floor := UnboundedBackoffCap
	if n := r.ConsecutiveFailures - 1; n < 30 { // beyond, the shift overflows; the cap is far smaller
		floor = min(time.Second<<n, UnboundedBackoffCap)
	}
	return max(wait, floor)
}

// spacedFrom is the earliest time a run may start after the last one
// (zero: no spacing, or nothing started yet).
func (r *Repeat) spacedFrom() time.Time {
	if r.IntervalSec <= 0 || r.LastStartAt.IsZero() {
		return time.Time{}
	}
	return r.LastStartAt.Add(time.Duration(r.IntervalSec) * time.Second)
}
