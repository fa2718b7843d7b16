package live

import "github.com/taskmesh/taskmesh/services/scheduler/lifecycle"

// Task statuses as the task API spells them (Task.status): the scheduler's
// own set (package lifecycle), as strings for the proto's status field.
const (
	StatusPending   = string(lifecycle.StatusPending)
	StatusAssigned  = string(lifecycle.StatusAssigned)
	StatusRunning   = string(lifecycle.StatusRunning)
	StatusCompleted = string(lifecycle.StatusCompleted)
	StatusFailed    = string(lifecycle.StatusFailed)
	StatusCancelled = string(lifecycle.StatusCancelled)
	StatusPreempted = string(lifecycle.StatusPreempted)
	StatusSuspended = string(lifecycle.StatusSuspended)
)

// Final reports whether a task in status makes no further transition on
// its own (lifecycle.Status.Final). A failed attempt with retries left is
// followed by a retry in the same commit, so a stream confirms "failed"
// with the scheduler before it ends (see stream.confirmFinal).
func Final(status string) bool { return lifecycle.Status(status).Final() }
