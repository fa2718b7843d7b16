package pg

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATE codes the helpers below recognise.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

// IsUniqueViolation reports whether err is a unique_violation (23505),
// optionally on the named constraint ("" = any). Use the constraint name to
// tell an expected duplicate (an idempotency key) from a bug (a duplicate
// primary key). err may be wrapped.
func IsUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != codeUniqueViolation {
		return false
	}
	return constraint == "" || pgErr.ConstraintName == constraint
}

// IsSerializationFailure reports serialization_failure (40001) and
// deadlock_detected (40P01): the transaction was aborted only because of
// concurrent transactions and may succeed if retried from the start.
// err may be wrapped.
func IsSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == codeSerializationFailure || pgErr.Code == codeDeadlockDetected
}
