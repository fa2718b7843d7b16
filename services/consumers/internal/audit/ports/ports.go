// Package ports serves the audit log over gRPC (taskmesh.audit.v1.AuditService):
// it maps the caller's principal and the request to the use case, the
// entries to the API's AuditLog, and errors to statuses, in one place.
package ports

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
	consumerports "github.com/taskmesh/taskmesh/services/consumers/internal/ports"
)

// Server is AuditService.
type Server struct {
	auditv1.UnimplementedAuditServiceServer
	App *app.App
	Log *slog.Logger
}

// caller is a tenant's API key or an operator; agents read no audit log.
func caller(ctx context.Context) (app.Caller, error) {
	tenant, operator, err := consumerports.CallerOf(ctx, "read the audit log")
	return app.Caller{Tenant: tenant, Operator: operator}, err
}

// ListAuditLogs implements AuditService.
func (s *Server) ListAuditLogs(ctx context.Context, r *auditv1.ListAuditLogsRequest) (*auditv1.ListAuditLogsResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	entries, next, err := s.App.ListAuditLogs(ctx, c, domain.QueryInput{Resource: r.GetResource(), Action: r.GetAction(),
		ResourceID: r.GetResourceId(), UserID: r.GetUserId(), From: r.GetFrom(), To: r.GetTo(), TenantID: r.GetTenantId(),
		PageSize: int(r.GetPageSize()), PageToken: r.GetPageToken()})
	if err != nil {
		return nil, toStatus(s.Log, err)
	}
	out := &auditv1.ListAuditLogsResponse{NextPageToken: next}
	for _, e := range entries {
		out.AuditLogs = append(out.AuditLogs, ToProto(e))
	}
	return out, nil
}

// ToProto shows an entry as the API does.
func ToProto(e domain.Entry) *auditv1.AuditLog {
	return &auditv1.AuditLog{Id: e.ID, Timestamp: timestamppb.New(e.At), Action: e.Action, Resource: e.Resource,
		ResourceId: e.ResourceID, UserId: e.UserID, MachineId: e.MachineID, Details: e.Details, Ip: e.IP, TenantId: e.TenantID}
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
