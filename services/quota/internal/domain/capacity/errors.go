package capacity

import (
	"errors"
	"fmt"
)

// Sentinel errors; the gRPC port maps each to one status and business code.
var (
	// ErrInvalid: an argument is malformed or breaks a quota rule.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: no such tenant, cluster, quota, WorkGroup or Ray cluster
	// (for this caller).
	ErrNotFound = errors.New("not found")
	// ErrExists: a tenant, cluster or quota of that name already exists.
	ErrExists = errors.New("already exists")
	// ErrConflict: the current state does not allow the change.
	ErrConflict = errors.New("conflict")
	// ErrInventoryInsufficient: the cluster has too few free GPUs.
	ErrInventoryInsufficient = errors.New("inventory insufficient")
	// ErrOperatorRejected is wrapped by cluster operators when a resource
	// can never be applied as it is (its custom resource definition is not
	// installed, the spec is refused). Other operator errors are retried.
	ErrOperatorRejected = errors.New("operator rejected the resource")
)

// InvalidError names the field that is wrong; errors.Is(err, ErrInvalid).
// The field is the request's (spec.children[1].min_units), so a client
// learns which part of a nested tree to fix.
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

// NotFound returns ErrNotFound naming what is missing.
func NotFound(what, id string) error { return fmt.Errorf("%w: %s %q", ErrNotFound, what, id) }

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConflict, fmt.Sprintf(format, args...))
}

func exists(what, id string) error { return fmt.Errorf("%w: %s %q", ErrExists, what, id) }
