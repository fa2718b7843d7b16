// Package ports serves usage reports over gRPC
// (taskmesh.usage.v1.UsageService), mapping callers, reports and errors in
// one place.
package ports

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	consumerports "github.com/taskmesh/taskmesh/services/consumers/internal/ports"
	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/usage/domain"
)

// Server is UsageService.
type Server struct {
	usagev1.UnimplementedUsageServiceServer
	App *app.App
	Log *slog.Logger
}

func caller(ctx context.Context) (app.Caller, error) {
	tenant, operator, err := consumerports.CallerOf(ctx, "read usage")
	return app.Caller{Tenant: tenant, Operator: operator}, err
}

// GetUsage implements UsageService. format only matters to the REST
// facade, which renders the same answer as CSV.
func (s *Server) GetUsage(ctx context.Context, r *usagev1.GetUsageRequest) (*usagev1.GetUsageResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	rep, err := s.App.Report(ctx, c, r.GetFrom(), r.GetTo(), r.GetGroupBy(), r.GetTenantId())
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	out := &usagev1.GetUsageResponse{From: rep.Query.From.Format(time.RFC3339Nano), To: rep.Query.Until.Format(time.RFC3339Nano),
		GroupBy: rep.Query.GroupBy, Currency: rep.Currency, Total: row(rep.Total)}
	for _, x := range rep.Rows {
		out.Rows = append(out.Rows, row(x))
	}
	return out, nil
}

func row(r domain.Row) *usagev1.UsageRow {
	return &usagev1.UsageRow{Key: r.Key, GpuSeconds: r.GPUSeconds, CpuSeconds: r.CPUSeconds, VideoSeconds: r.VideoSeconds,
		StageSeconds: r.StageSeconds, Amount: r.Amount, Items: r.Items}
}

func toStatus(log *slog.Logger, err error) error {
	return grpcserver.ToStatus(log, err, func(err error) (error, bool) {
		var ie *domain.InvalidError
		if errors.As(err, &ie) {
			return grpcserver.Status(codes.InvalidArgument, grpcserver.CodeInvalidArgument, "INVALID_ARGUMENT", err.Error(),
				&errdetails.BadRequest_FieldViolation{Field: ie.Field, Description: ie.Reason}), true
		}
		return nil, false
	})
}
