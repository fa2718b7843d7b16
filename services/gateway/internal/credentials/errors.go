package credentials

import (
	"errors"
	"fmt"
)

// Sentinel errors; the methods wrap them with details.
var (
	// ErrUnauthenticated: the bearer string is missing, malformed, unknown,
	// wrong, expired or revoked (HTTP 401).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: a valid agent token used from an address it may not be
	// used from (HTTP 403).
	ErrForbidden = errors.New("forbidden")
	// ErrInvalid: an argument of a management call is malformed.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: no such tenant, key or token.
	ErrNotFound = errors.New("not found")
	// ErrExists: a tenant with this id already exists.
	ErrExists = errors.New("already exists")
	// ErrRevoked: the token is revoked and cannot be rotated; create a new
	// one.
	ErrRevoked = errors.New("revoked")
)

// FieldError is an ErrInvalid about one field of a management call,
// named as the admin API spells it (allowed_cidrs[1], expires_at), so the
// API can name the field in its answer and as a violation.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return ErrInvalid.Error() + ": " + e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalidField(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// AuthError is the error of Authenticate. Reason is written for the caller
// and is safe to show: it never contains the secret, and it says more than
// "invalid credentials" (expired, revoked, wrong address) only once the
// caller has proven it holds the secret.
type AuthError struct {
	// Kind is ErrUnauthenticated or ErrForbidden.
	Kind   error
	Reason string
}

func (e *AuthError) Error() string { return e.Kind.Error() + ": " + e.Reason }

// Unwrap lets errors.Is(err, ErrUnauthenticated) work.
func (e *AuthError) Unwrap() error { return e.Kind }

func unauthenticated(reason string) error {
	return &AuthError{Kind: ErrUnauthenticated, Reason: reason}
}

func forbidden(reason string) error {
	return &AuthError{Kind: ErrForbidden, Reason: reason}
}
