package domain

import (
	"errors"
	"fmt"
)

// Sentinel errors; each maps to one business code
// (docs/api/tasks.md#business-codes).
var (
	// ErrAttemptMismatch: the attempt is not the task's current one (30001).
	ErrAttemptMismatch = errors.New("attempt mismatch")
	// ErrImmutable: the task is final or cannot change this way (30002).
	ErrImmutable = errors.New("task is final or cannot change")
	// ErrLeaseExpired: the attempt's lease has run out (30003).
	ErrLeaseExpired = errors.New("lease expired")
	// ErrNotFound: no such task for this caller (30004).
	ErrNotFound = errors.New("task not found")
	// ErrInvalid: a field is missing or out of range (30005).
	ErrInvalid = errors.New("invalid argument")
)

// InvalidError names the field that is wrong; errors.Is(err, ErrInvalid).
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// immutable wraps ErrImmutable with the state that refused.
func immutable(t Task, what string) error {
	return fmt.Errorf("%w: cannot %s a %s task", ErrImmutable, what, t.Status)
}
