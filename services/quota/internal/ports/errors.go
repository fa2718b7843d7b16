// Package ports serves QuotaService over gRPC: proto ↔ domain mapping,
// the caller's rights, and the one place where errors become gRPC
// statuses (with the business code of quotav1.ErrorCode in an ErrorInfo).
package ports

import (
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

func statusWith(c codes.Code, code quotav1.ErrorCode, msg string) error {
	return grpcserver.CodeStatus(c, code, msg)
}

// toStatus maps a use case's error to a gRPC status (grpcserver.ToStatus
// with the quota service's errors). Statuses pass through: CheckGUQuota
// builds its own.
func toStatus(log *slog.Logger, err error) error {
	return grpcserver.ToStatus(log, err, quotaStatus)
}

func quotaStatus(err error) (error, bool) {
	var invalid *capacity.InvalidError
	switch {
	case errors.As(err, &invalid):
		// Malformed requests use the task API's 30005, like validation.
		return grpcserver.CodeStatus(codes.InvalidArgument, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, err.Error(),
			&errdetails.BadRequest_FieldViolation{Field: invalid.Field, Description: invalid.Reason}), true
	case errors.Is(err, capacity.ErrInvalid):
		return grpcserver.CodeStatus(codes.InvalidArgument, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, err.Error()), true
	case errors.Is(err, capacity.ErrInventoryInsufficient):
		return statusWith(codes.FailedPrecondition, quotav1.ErrorCode_ERROR_CODE_INVENTORY_INSUFFICIENT, err.Error()), true
	case errors.Is(err, capacity.ErrNotFound):
		return statusWith(codes.NotFound, quotav1.ErrorCode_ERROR_CODE_QUOTA_NOT_FOUND, err.Error()), true
	case errors.Is(err, capacity.ErrExists):
		return statusWith(codes.AlreadyExists, quotav1.ErrorCode_ERROR_CODE_QUOTA_EXISTS, err.Error()), true
	case errors.Is(err, capacity.ErrConflict):
		return statusWith(codes.FailedPrecondition, quotav1.ErrorCode_ERROR_CODE_QUOTA_CONFLICT, err.Error()), true
	case errors.Is(err, app.ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error()), true
	}
	return nil, false
}
