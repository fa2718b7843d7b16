// Package ports serves the admission layer's gRPC API (AdmissionService):
// principal → caller, proto ↔ use case mapping, and the one place where
// errors become gRPC statuses.
package ports

import (
	"errors"
	"log/slog"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

// toStatus maps a use case error to a gRPC status (grpcserver.ToStatus
// with the admission layer's errors). Statuses from dependencies (the GU
// quota check) pass through unchanged.
func toStatus(log *slog.Logger, err error) error {
	return grpcserver.ToStatus(log, err, admissionStatus)
}

func admissionStatus(err error) (error, bool) {
	switch {
	case errors.Is(err, app.ErrInvalid), errors.Is(err, app.ErrUnknownQueue), errors.Is(err, app.ErrNoQuota):
		return grpcserver.CodeStatus(codes.InvalidArgument, taskv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, err.Error()), true
	// Each carries the ErrorInfo of the code the gateway's REST mapping
	// gives its gRPC code, so a gRPC client reads the same business code
	// as a REST one.
	case errors.Is(err, app.ErrQueueNotAllowed), errors.Is(err, app.ErrPermissionDenied):
		return grpcserver.Status(codes.PermissionDenied, http.StatusForbidden, "PERMISSION_DENIED", err.Error()), true
	case errors.Is(err, app.ErrNotFound):
		return grpcserver.CodeStatus(codes.NotFound, taskv1.ErrorCode_ERROR_CODE_TASK_NOT_FOUND, err.Error()), true
	case errors.Is(err, app.ErrInUse):
		return grpcserver.CodeStatus(codes.FailedPrecondition, taskv1.ErrorCode_ERROR_CODE_TASK_IMMUTABLE, err.Error()), true
	case errors.Is(err, app.ErrNotActive):
		// Without ErrorInfo: the gateway answers Unavailable with 503
		// (30099), where a 30099 ErrorInfo would read 500.
		return status.Error(codes.Unavailable, err.Error()), true
	}
	return nil, false
}
