// Package rpcerr reads and writes the business error codes of the Taskmesh
// executor protocol.
//
// The server answers with a gRPC status whose details carry a
// google.rpc.ErrorInfo{Domain: "taskmesh", Metadata: {"code": "30003"}}.
// The gRPC code alone is not enough: 30002 (task final) and 30003 (lease
// expired) are both FailedPrecondition, and only the business code tells
// the agent whether its attempt is gone. Errors without an ErrorInfo (a
// broken connection, a deadline, an unreachable server) carry code 0 and
// are treated as transient by the agent.
package rpcerr

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
)

// Domain is the ErrorInfo domain of Taskmesh business errors.
const Domain = grpcserver.ErrorDomain

// Business codes, as numbers (see taskmesh.task.v1.ErrorCode).
const (
	AttemptMismatch = int(taskv1.ErrorCode_ERROR_CODE_ATTEMPT_MISMATCH)
	TaskImmutable   = int(taskv1.ErrorCode_ERROR_CODE_TASK_IMMUTABLE)
	LeaseExpired    = int(taskv1.ErrorCode_ERROR_CODE_LEASE_EXPIRED)
	TaskNotFound    = int(taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND)
	InvalidArgument = int(taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)
	Internal        = int(taskv1.ErrorCode_ERROR_CODE_INTERNAL)
)

// Code returns the business code carried by err, or 0 when err is nil or
// carries none (transport failures, deadlines, plain gRPC errors).
func Code(err error) int { return grpcserver.Code(err) }

// AttemptGone reports whether err says the attempt no longer belongs to the
// caller: another attempt holds the task (30001), the task is final (30002)
// or the lease expired (30003). The agent must stop and must not complete.
func AttemptGone(err error) bool {
	switch Code(err) {
	case AttemptMismatch, TaskImmutable, LeaseExpired:
		return true
	}
	return false
}

// Transient reports whether a call that failed with err may succeed if
// repeated: anything without a business code except a caller mistake, plus
// the server's internal error (30099).
func Transient(err error) bool {
	if err == nil {
		return false
	}
	c := Code(err)
	if c == Internal {
		return true
	}
	return c == 0
}

// grpcCodes maps each business code to the gRPC code the server uses.
var grpcCodes = map[int]codes.Code{
	AttemptMismatch: codes.Aborted,
	TaskImmutable:   codes.FailedPrecondition,
	LeaseExpired:    codes.FailedPrecondition,
	TaskNotFound:    codes.NotFound,
	InvalidArgument: codes.InvalidArgument,
	Internal:        codes.Internal,
}

// New returns a status error carrying the business code, built the way the
// server builds them (used by the agent-local API and by tests).
func New(code int, msg string) error {
	gc, ok := grpcCodes[code]
	if !ok {
		gc = codes.Unknown
	}
	return grpcserver.Status(gc, code, strings.TrimPrefix(taskv1.ErrorCode(code).String(), "ERROR_CODE_"), msg)
}

// FromGRPC returns the business code for an error that carries none,
// derived from its gRPC code, so every error can be shown in the
// {"code","message","data"} envelope.
func FromGRPC(err error) int {
	if c := Code(err); c != 0 {
		return c
	}
	switch status.Code(err) {
	case codes.NotFound:
		return TaskNotFound
	case codes.InvalidArgument, codes.OutOfRange:
		return InvalidArgument
	case codes.Aborted:
		return AttemptMismatch
	case codes.FailedPrecondition:
		return TaskImmutable
	}
	return Internal
}

// Message returns the human-readable part of err.
func Message(err error) string {
	if err == nil {
		return ""
	}
	return status.Convert(err).Message()
}
