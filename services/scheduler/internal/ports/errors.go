// Package ports serves the scheduler's gRPC API (TaskService,
// LeaseService): proto ↔ domain mapping, request validation, and the one
// place where errors become gRPC statuses.
package ports

import (
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// statusWith builds a status carrying the business code (see
// grpcserver.CodeStatus).
func statusWith(c codes.Code, code taskv1.ErrorCode, msg string, details ...*errdetails.BadRequest_FieldViolation) error {
	return grpcserver.CodeStatus(c, code, msg, details...)
}

// toStatus maps an error of the use cases to a gRPC status: the only place
// that does (grpcserver.ToStatus with the scheduler's errors).
func toStatus(log *slog.Logger, err error) error {
	return grpcserver.ToStatus(log, err, schedulerStatus)
}

func schedulerStatus(err error) (error, bool) {
	var invalid *domain.InvalidError
	switch {
	case errors.As(err, &invalid):
		return statusWith(codes.InvalidArgument, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, err.Error(),
			&errdetails.BadRequest_FieldViolation{Field: invalid.Field, Description: invalid.Reason}), true
	case errors.Is(err, domain.ErrInvalid):
		return statusWith(codes.InvalidArgument, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, err.Error()), true
	case errors.Is(err, domain.ErrAttemptMismatch):
		return statusWith(codes.Aborted, taskv1.ErrorCode_ERROR_CODE_ATTEMPT_MISMATCH, err.Error()), true
	case errors.Is(err, domain.ErrLeaseExpired):
		return statusWith(codes.FailedPrecondition, taskv1.ErrorCode_ERROR_CODE_LEASE_EXPIRED, err.Error()), true
	case errors.Is(err, domain.ErrImmutable):
		return statusWith(codes.FailedPrecondition, taskv1.ErrorCode_ERROR_CODE_TASK_IMMUTABLE, err.Error()), true
	case errors.Is(err, app.ErrResultExpired):
		// The result, not the task, is gone: not found, and why.
		return statusWith(codes.NotFound, taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND, err.Error()), true
	case errors.Is(err, domain.ErrNotFound):
		return statusWith(codes.NotFound, taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND, err.Error()), true
	case errors.Is(err, app.ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error()), true
	case errors.Is(err, app.ErrStopping):
		return status.Error(codes.Unavailable, "scheduler is shutting down"), true
	}
	return nil, false
}

// ToStatus is toStatus for the scheduler's other gRPC services (the video
// API), so that every scheduler error is mapped by the same rules.
func ToStatus(log *slog.Logger, err error) error { return toStatus(log, err) }
