package pg

import (
	"context"
	"errors"
	"io"
	"net"

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

// IsTransient reports whether err says something about the database or the
// connection rather than about the statement's data: the connection broke
// or was never made (class 08, network errors, the server gone mid-read), the transaction lost a race
// (class 40), the server is short of resources or shutting down (classes
// 53, 57, 58), a lock could not be had in time (55P03), or ctx ended. Doing
// the same work again later may succeed. Anything else — a value the column
// refuses (class 22), a constraint (class 23), an error that is not the
// database's at all — fails the same way every time. err may be wrapped.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "40", "53", "57", "58":
			return true
		}
		return pgErr.Code == "55P03"
	}
	// A server that dies mid-query (an immediate shutdown, a crash, a
	// killed backend) closes the socket under pgx, which reports the
	// read as an unexpected EOF with nothing else to go by.
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}
