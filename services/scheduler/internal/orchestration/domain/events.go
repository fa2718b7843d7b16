package domain

import (
	"slices"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Event is a fact about one group or template, named in the past tense.
type Event interface{ EventName() string }

// Record is an event with when and by whom it happened.
type Record struct {
	Event Event
	At    time.Time
	Actor string
	// IP is the address of the client whose request caused the event
	// (empty for the process manager's own decisions).
	IP string
}

// Group events.
type (
	// Created: the group exists, pending.
	Created struct {
		ID, TenantID, CreatedBy, RequestID string
		Def                                Definition
	}
	// Started: pending → running.
	Started struct{}
	// Released: these members got their tasks (created in the same
	// transaction).
	Released struct{ Members []Release }
	// Changed: member tasks changed status.
	Changed struct{ Members []Change }
	// Completed: every member completed (a repeat: count runs).
	Completed struct{}
	// Failed: the group failed; Members are the members whose failure
	// caused it (as far as the group knows them).
	Failed struct {
		Reason  string
		Members []string
	}
	// Canceled: the group was cancelled.
	Canceled struct{ Reason string }
	// Deleted: the group is gone.
	Deleted struct{}
	// CircuitOpened: a repeat's breaker opened.
	CircuitOpened struct{ ConsecutiveFailures, Failures int }
	// RepeatReset: an operator closed a repeat's breaker.
	RepeatReset struct{ Operator, Reason string }
)

// Release is one released member: its task, and for a repeat its run and
// attempt (a repeat's members are made at their release).
type Release struct {
	Key, TaskID  string
	Run, Attempt int
}

// Change is one member task's change of status.
type Change struct {
	Key, TaskID        string
	From, To           task.Status
	StartedAt, EndedAt time.Time
	Error              string
}

func (Created) EventName() string       { return "TaskGroupCreated" }
func (Started) EventName() string       { return "TaskGroupStarted" }
func (Released) EventName() string      { return "TaskGroupMembersReleased" }
func (Changed) EventName() string       { return "TaskGroupMembersChanged" }
func (Completed) EventName() string     { return "TaskGroupCompleted" }
func (Failed) EventName() string        { return "TaskGroupFailed" }
func (Canceled) EventName() string      { return "TaskGroupCanceled" }
func (Deleted) EventName() string       { return "TaskGroupDeleted" }
func (CircuitOpened) EventName() string { return "TaskGroupCircuitOpened" }
func (RepeatReset) EventName() string   { return "TaskGroupRepeatReset" }

// Apply folds one group event into s, in place: the one fold of group
// events (the inline projection, its rebuild and every decision use it).
// Events are facts, so it never fails; it reports false for an event it
// has no case for. A member an event names must be in s.Members unless it
// is final: commands name open members (RetryMember, which names a final
// one, loads them all), and a rebuild loads them all.
func (s *State) Apply(r Record) bool {
	g := &s.Group
	g.Version++
	g.UpdatedAt = r.At
	switch e := r.Event.(type) {
	case Created:
		s.create(e, r.At)
	case Started:
		g.Status, g.StartedAt = StatusRunning, r.At
	case Released:
		for _, rel := range e.Members {
			s.release(rel)
		}
	case Changed:
		for _, c := range e.Members {
			s.change(c, r.At)
		}
	case Completed:
		g.Status, g.EndedAt = StatusCompleted, r.At
	case Failed:
		g.Status, g.EndedAt, g.Reason = StatusFailed, r.At, e.Reason
	case Canceled:
		g.Status, g.EndedAt, g.Reason = StatusCancelled, r.At, "cancelled"
		if e.Reason != "" {
			g.Reason = "cancelled: " + e.Reason
		}
		// Members never released will never run.
		for k, m := range s.Members {
			if !m.Released() && !m.Status.Final() {
				s.count(m.Status, task.StatusCancelled)
				m.Status, m.EndedAt, m.Version = task.StatusCancelled, r.At, g.Version
				s.Members[k] = m
			}
		}
		if g.Repeat != nil {
			g.Repeat.Retries = nil
		}
	case Deleted:
		g.Deleted = true
	case CircuitOpened:
		g.Repeat.CircuitOpen = true
	case RepeatReset:
		rp := g.Repeat
		rp.CircuitOpen, rp.ConsecutiveFailures = false, 0
		rp.ResetBy, rp.ResetReason, rp.ResetAt = e.Operator, e.Reason, r.At
	default:
		return false
	}
	return true
}

// Handles reports whether Apply has a case for e.
func Handles(e Event) bool {
	s := State{Members: map[string]Member{}, Group: Group{Repeat: &Repeat{}, Counts: map[task.Status]int{}}}
	return s.Apply(Record{Event: e})
}

func (s *State) create(e Created, at time.Time) {
	d := e.Def
	s.Group = Group{ID: e.ID, TenantID: e.TenantID, CreatedBy: e.CreatedBy, RequestID: e.RequestID, Name: d.Name,
		Mode: d.Mode, Status: StatusPending, MaxParallel: d.MaxParallel, Webhook: d.Webhook, Total: len(d.Members),
		Counts: map[task.Status]int{}, Version: s.Group.Version, CreatedAt: at, UpdatedAt: at}
	if len(d.Members) > 0 {
		s.Group.Counts[task.StatusPending] = len(d.Members)
	}
	if r := d.Repeat; r != nil {
		s.Group.Repeat = &Repeat{Count: r.Count, Parallel: r.Parallel, IntervalSec: r.IntervalSec,
			MaxFailures: r.MaxFailures, BackoffSec: r.BackoffSec, Threshold: r.Threshold, Spec: r.Spec,
			ClusterQueue: r.ClusterQueue}
	}
	s.Members = make(map[string]Member, len(d.Members))
	for i, m := range d.Members {
		s.Members[m.Key] = Member{Key: m.Key, Index: i, Name: m.Spec.Name, DependsOn: m.DependsOn, Spec: m.Spec,
			ClusterQueue: m.ClusterQueue, PlannedTaskID: m.TaskID, Status: task.StatusPending, Version: s.Group.Version}
	}
}

func (s *State) release(rel Release) {
	g := &s.Group
	if g.Mode != ModeRepeat {
		if m, ok := s.Members[rel.Key]; ok {
			// The task holds the spec from now on.
			m.TaskID, m.Spec, m.ClusterQueue, m.Version = rel.TaskID, task.Spec{}, "", g.Version
			s.Members[rel.Key] = m
		}
		return
	}
	r := g.Repeat
	s.Members[rel.Key] = Member{Key: rel.Key, Index: g.Total, Name: r.Spec.Name, TaskID: rel.TaskID,
		Status: task.StatusPending, Run: rel.Run, Attempt: rel.Attempt, Version: g.Version}
	g.Total++
	s.count("", task.StatusPending)
	if rel.Attempt <= 1 {
		r.Released++
		return
	}
	r.Retries = slices.DeleteFunc(r.Retries, func(rt Retry) bool { return rt.Run == rel.Run })
}

// change mirrors one member task's new status, and counts a repeat's run
// outcomes while the repeat runs. A change from a final status back to an
// open one is a member retried (RetryMember): its task reads as a new
// one, without the times of its last attempt, and it is no longer among
// the failed members.
func (s *State) change(c Change, at time.Time) {
	g := &s.Group
	s.count(c.From, c.To)
	reopened := c.From.Final() && !c.To.Final()
	m, loaded := s.Members[c.Key]
	if loaded {
		m.Status, m.Error = c.To, c.Error
		if !c.StartedAt.IsZero() || reopened {
			m.StartedAt = c.StartedAt
		}
		m.EndedAt, m.Version = c.EndedAt, g.Version
		s.Members[c.Key] = m
	}
	r := g.Repeat
	if g.Mode != ModeRepeat || r == nil {
		switch {
		case c.To == task.StatusFailed && !c.From.Final():
			g.failed(c.Key)
		case reopened && c.From == task.StatusFailed:
			g.FailedMembers = slices.DeleteFunc(g.FailedMembers, func(k string) bool { return k == c.Key })
		}
		return
	}
	if c.StartedAt.After(r.LastStartAt) {
		r.LastStartAt = c.StartedAt
	}
	if g.Status != StatusRunning || c.From.Final() || !c.To.Final() {
		return
	}
	if c.To == task.StatusCompleted {
		r.Completed++
		r.ConsecutiveFailures = 0
		return
	}
	r.Failures++
	r.ConsecutiveFailures++
	ended := c.EndedAt
	if ended.IsZero() {
		ended = at
	}
	r.Retries = append(r.Retries, Retry{Run: m.Run, Attempt: m.Attempt + 1,
		DueAt: ended.Add(r.RetryWait())})
}

// count moves one member from status from ("" = new) to status to.
func (s *State) count(from, to task.Status) {
	c := s.Group.Counts
	if c == nil {
		c = map[task.Status]int{}
		s.Group.Counts = c
	}
	if from != "" {
		if c[from]--; c[from] <= 0 {
			delete(c, from)
		}
	}
	c[to]++
}
