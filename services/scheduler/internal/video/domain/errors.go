package domain

import (
	"errors"
	"fmt"
)

// InvalidError is a request the documented limits refuse; Field is the
// request's JSON path (input.prompt, parameters.seed, …). It is answered as
// InvalidParameter (400) and nothing is stored.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

// RequireTaskID refuses a query or DELETE that names no task: a path
// ending in "generations/" (or "tasks/") is a client's mistake, not a
// question about a task that does not exist, so it must not be answered
// UNKNOWN, and above all a DELETE must not report success.
func RequireTaskID(id string) error {
	if id == "" {
		// Worded for both transports: over gRPC there is no path.
		return invalid("task_id", "is required (over REST it is the last path segment)")
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Errors of the DELETE table and of access.
var (
	// ErrTaskRunning: a RUNNING generation can be neither canceled nor
	// deleted (409 UnsupportedOperation.TaskRunning).
	ErrTaskRunning = errors.New("the task is running; a running generation can be neither canceled nor deleted")
	// ErrTaskCanceled: a CANCELED generation cannot be deleted; it is removed
	// automatically when its retention ends (409
	// UnsupportedOperation.TaskCanceled).
	ErrTaskCanceled = errors.New("the task is canceled; it cannot be deleted and is removed automatically 24 hours after submission")
	// ErrForbidden: the task belongs to another tenant (403 AccessDenied).
	ErrForbidden = errors.New("the task belongs to another tenant")
)
