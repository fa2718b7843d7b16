// Package ports serves webhook notifications over gRPC
// (taskmesh.webhook.v1.WebhookService): callers, messages and errors are
// mapped here, in one place.
package ports

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	consumerports "github.com/taskmesh/taskmesh/services/consumers/internal/ports"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/app"
	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

// Server is WebhookService.
type Server struct {
	webhookv1.UnimplementedWebhookServiceServer
	App *app.App
	Log *slog.Logger
}

func caller(ctx context.Context) (app.Caller, error) {
	tenant, operator, err := consumerports.CallerOf(ctx, "use the webhook API")
	return app.Caller{Tenant: tenant, Operator: operator}, err
}

// GetWebhookEndpoint implements WebhookService.
func (s *Server) GetWebhookEndpoint(ctx context.Context, _ *webhookv1.GetWebhookEndpointRequest) (*webhookv1.GetWebhookEndpointResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	e, err := s.App.GetEndpoint(ctx, c)
	if err != nil {
		return nil, s.status(err)
	}
	return &webhookv1.GetWebhookEndpointResponse{Endpoint: endpoint(e)}, nil
}

// SetWebhookEndpoint implements WebhookService.
func (s *Server) SetWebhookEndpoint(ctx context.Context, r *webhookv1.SetWebhookEndpointRequest) (*webhookv1.SetWebhookEndpointResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	e, secret, err := s.App.SetEndpoint(ctx, c, r.GetUrl())
	if err != nil {
		return nil, s.status(err)
	}
	return &webhookv1.SetWebhookEndpointResponse{Endpoint: endpoint(e), Secret: secret}, nil
}

// RotateWebhookSecret implements WebhookService.
func (s *Server) RotateWebhookSecret(ctx context.Context, _ *webhookv1.RotateWebhookSecretRequest) (*webhookv1.RotateWebhookSecretResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	e, secret, err := s.App.RotateSecret(ctx, c)
	if err != nil {
		return nil, s.status(err)
	}
	return &webhookv1.RotateWebhookSecretResponse{Endpoint: endpoint(e), Secret: secret}, nil
}

// ListWebhookDeliveries implements WebhookService.
func (s *Server) ListWebhookDeliveries(ctx context.Context, r *webhookv1.ListWebhookDeliveriesRequest) (*webhookv1.ListWebhookDeliveriesResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	views, next, err := s.App.ListDeliveries(ctx, c, r.GetState(), r.GetTaskId(), r.GetTenantId(), int(r.GetPageSize()), r.GetPageToken())
	if err != nil {
		return nil, s.status(err)
	}
	out := &webhookv1.ListWebhookDeliveriesResponse{NextPageToken: next}
	for _, v := range views {
		out.Deliveries = append(out.Deliveries, Delivery(v, nil))
	}
	return out, nil
}

// GetWebhookDelivery implements WebhookService.
func (s *Server) GetWebhookDelivery(ctx context.Context, r *webhookv1.GetWebhookDeliveryRequest) (*webhookv1.GetWebhookDeliveryResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	v, attempts, err := s.App.GetDelivery(ctx, c, r.GetDeliveryId())
	if err != nil {
		return nil, s.status(err)
	}
	return &webhookv1.GetWebhookDeliveryResponse{Delivery: Delivery(v, attempts)}, nil
}

// RedeliverWebhook implements WebhookService.
func (s *Server) RedeliverWebhook(ctx context.Context, r *webhookv1.RedeliverWebhookRequest) (*webhookv1.RedeliverWebhookResponse, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	v, err := s.App.Redeliver(ctx, c, r.GetDeliveryId())
	if err != nil {
		return nil, s.status(err)
	}
	return &webhookv1.RedeliverWebhookResponse{Delivery: Delivery(v, nil)}, nil
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func endpoint(e app.Endpoint) *webhookv1.WebhookEndpoint {
	return &webhookv1.WebhookEndpoint{TenantId: e.TenantID, Url: e.URL, HasSecret: e.HasSecret,
		SecretCreatedAt: ts(e.SecretCreatedAt), UpdatedAt: ts(e.UpdatedAt)}
}

// Delivery shows a delivery, with its attempts when given.
func Delivery(v app.DeliveryView, attempts []app.Attempt) *webhookv1.WebhookDelivery {
	out := &webhookv1.WebhookDelivery{Id: v.ID, TenantId: v.TenantID, TaskId: v.TaskID, Status: v.Status, Url: v.URL, Body: v.Body,
		State: v.State, Attempts: int32(v.Attempts), CreatedAt: ts(v.CreatedAt), DeliveredAt: ts(v.DeliveredAt), LastError: v.LastError}
	if v.State == domain.StatePending {
		out.NextAttemptAt = ts(v.NextAttemptAt)
	}
	for _, a := range attempts {
		out.AttemptLog = append(out.AttemptLog, &webhookv1.WebhookAttempt{Number: int32(a.Number), At: ts(a.At), Url: a.URL,
			HttpStatus: int32(a.HTTPStatus), Error: a.Error, DurationMs: a.Duration.Milliseconds(), ResponseBody: a.ResponseBody})
	}
	return out
}

func (s *Server) status(err error) error {
	return grpcserver.ToStatus(s.Log, err, func(err error) (error, bool) {
		var ie *domain.InvalidError
		switch {
		case errors.As(err, &ie):
			return grpcserver.Status(codes.InvalidArgument, grpcserver.CodeInvalidArgument, "INVALID_ARGUMENT", err.Error(),
				&errdetails.BadRequest_FieldViolation{Field: ie.Field, Description: ie.Reason}), true
		case errors.Is(err, app.ErrNotFound):
			return grpcserver.CodeStatus(codes.NotFound, webhookv1.ErrorCode_ERROR_CODE_DELIVERY_NOT_FOUND, err.Error()), true
		case errors.Is(err, app.ErrForbidden):
			return status.Error(codes.PermissionDenied, err.Error()), true
		}
		return nil, false
	})
}
