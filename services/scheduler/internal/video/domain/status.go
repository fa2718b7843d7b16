package domain

import (
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Video statuses (docs/api/video.md#statuses).
const (
	StatusQueued    = "QUEUED"
	StatusRunning   = "RUNNING"
	StatusSucceeded = "SUCCEEDED"
	StatusFailed    = "FAILED"
	StatusCanceled  = "CANCELED"
	StatusUnknown   = "UNKNOWN"
)

// Retention is how long a task id and its video stay valid: afterwards
// queries answer UNKNOWN.
const Retention = 24 * time.Hour

// StatusOf reads a scheduler task as a video status at now. Waiting in any
// form (pending, leased but not started, preempted, suspended) is QUEUED; a
// removed task, or one past its retention, is UNKNOWN.
func StatusOf(t task.Task, now time.Time) string {
	if t.Deleted || Expired(t, now) {
		return StatusUnknown
	}
	switch t.Status {
	case task.StatusPending, task.StatusAssigned, task.StatusPreempted, task.StatusSuspended:
		return StatusQueued
	case task.StatusRunning:
		return StatusRunning
	case task.StatusCompleted:
		return StatusSucceeded
	case task.StatusFailed:
		return StatusFailed
	case task.StatusCancelled:
		return StatusCanceled
	}
	return StatusUnknown
}

// Expired reports whether t's retention has ended at now.
func Expired(t task.Task, now time.Time) bool { return !now.Before(t.CreatedAt.Add(Retention)) }

// Remaining is how long t's retention lasts after now (0 once it has
// ended): what a link to its video may be signed for.
func Remaining(t task.Task, now time.Time) time.Duration {
	return max(0, t.CreatedAt.Add(Retention).Sub(now))
}

// Deletion is what a DELETE does to a task.
type Deletion int

// The DELETE table's actions.
const (
	// DeleteNothing: the task is already gone (UNKNOWN); the answer says so.
	DeleteNothing Deletion = iota
	// DeleteCancel: a QUEUED task is canceled and reads CANCELED.
	DeleteCancel
	// DeleteRemove: a SUCCEEDED or FAILED task is removed with its video and
	// reads UNKNOWN.
	DeleteRemove
)

// DecideDelete applies the DELETE table to a task in video status s:
// QUEUED → cancel; SUCCEEDED, FAILED → remove; RUNNING → ErrTaskRunning;
// CANCELED → ErrTaskCanceled (it is removed when its retention ends);
// UNKNOWN → nothing.
func DecideDelete(s string) (Deletion, error) {
	switch s {
	case StatusQueued:
		return DeleteCancel, nil
	case StatusSucceeded, StatusFailed:
		return DeleteRemove, nil
	case StatusRunning:
		return DeleteNothing, ErrTaskRunning
	case StatusCanceled:
		return DeleteNothing, ErrTaskCanceled
	}
	return DeleteNothing, nil
}
