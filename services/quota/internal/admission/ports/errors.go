// Package ports serves the admission layer's gRPC API (AdmissionService):
// principal → caller, proto ↔ use case mapping, and the one place where
// errors become gRPC statuses.
package ports

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

// statusWith builds a status carrying a business code (see
// grpcserver.Status).
func statusWith(c codes.Code, code taskv1.ErrorCode, msg string) error {
	return grpcserver.Status(c, int(code), strings.TrimPrefix(code.String(), "ERROR_CODE_"), msg)
}

// toStatus maps a use case error to a gRPC status. Statuses from
// dependencies (the GU quota check) pass through unchanged; unknown
// errors are logged and answered as internal without their text.
func toStatus(log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !errors.Is(err, context.Canceled) {
		return err
	}
	switch {
	case errors.Is(err, app.ErrInvalid), errors.Is(err, app.ErrUnknownQueue):
		return statusWith(codes.InvalidArgument, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, err.Error())
	case errors.Is(err, app.ErrQueueNotAllowed), errors.Is(err, app.ErrPermissionDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, app.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, app.ErrInUse):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	log.Error("internal error", "err", err)
	return statusWith(codes.Internal, taskv1.ErrorCode_ERROR_CODE_INTERNAL, "internal error")
}
