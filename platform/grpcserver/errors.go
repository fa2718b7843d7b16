package grpcserver

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/taskmesh/taskmesh/platform/logthrottle"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// outages writes the warnings of a database outage, which every request
// meets at once, as one line per window (package logthrottle).
var outages = logthrottle.New(logthrottle.Window)

// ErrorCode is a generated business error enum (taskv1.ErrorCode,
// quotav1.ErrorCode): its value is the documented code, its name
// "ERROR_CODE_<REASON>".
type ErrorCode interface {
	~int32
	String() string
}

// CodeStatus is Status for a business error enum: the reason is the enum's
// name without its "ERROR_CODE_" prefix.
func CodeStatus[C ErrorCode](c codes.Code, code C, msg string, fields ...*errdetails.BadRequest_FieldViolation) error {
	return Status(c, int(code), strings.TrimPrefix(code.String(), "ERROR_CODE_"), msg, fields...)
}

// ToStatus maps a use case's error to the gRPC status a service answers,
// the one way every service does: a status passes through unchanged (a
// dependency's answer, e.g. the GU quota check); then the service's own
// mapping, which returns false for errors it does not know; then
// cancellation and deadlines; a change that lost to concurrent ones in
// every run its store gave it (pg.IsSerializationFailure), and a database
// that is unreachable or restarting (pg.IsTransient), are Unavailable, which the gateway answers
// with 503 (docs/api/README.md: 30099 is 503 when a service is
// unavailable) and clients retry, and are logged once per window of
// package logthrottle; anything else is logged and answered as internal,
// without its text.
func ToStatus(log *slog.Logger, err error, service func(error) (error, bool)) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !errors.Is(err, context.Canceled) {
		return err
	}
	if st, ok := service(err); ok {
		return st
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case pg.IsSerializationFailure(err):
		// Concurrent changes of the same data won every run the store
		// gave the command (pg.InTxRetried); nothing of it is stored, and
		// the database is fine.
		outages.Log(context.Background(), log, slog.LevelWarn, "change lost to concurrent changes", "err", err)
		return status.Error(codes.Unavailable, "service unavailable: concurrent changes of the same data; retry")
	case pg.IsTransient(err):
		outages.Log(context.Background(), log, slog.LevelWarn, "database unavailable", "err", err)
		return status.Error(codes.Unavailable, "service unavailable: the database cannot be reached; retry later")
	}
	log.Error("internal error", "err", err)
	return Status(codes.Internal, CodeInternal, "INTERNAL", "internal error")
}
