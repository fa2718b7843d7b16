package rest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	managedv1 "github.com/taskmesh/taskmesh/gen/taskmesh/managed/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
	"github.com/taskmesh/taskmesh/services/gateway/internal/apijson"
	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
	"github.com/taskmesh/taskmesh/services/gateway/internal/requestid"
)

// marshaler writes the documented JSON (docs/api/README.md#json): proto
// field names (snake_case) and every field present even when unset, so
// clients see "exit_code": null rather than a missing key (protojson
// leaves an unset proto3 optional field out; NullOptional writes it as
// null). Unknown request fields are errors, so a misspelt field is
// reported instead of silently ignored, and a number sent as a string
// to a 32-bit integer field ("priority": "3") is refused: the task
// queue's design types those fields int. Answers are written by package
// apijson, protojson's output at a fraction of its cost.
var marshaler = &apijson.Marshaler{JSONPb: runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}, NullOptional: true, StrictInt32: true}

// newAPIMux returns the generated REST mux for the lease, task-group and
// template services, the quota service's routes when quota is set, and
// the consumers service's (audit log, usage, webhooks) when consumers is.
// The task service's routes come last, from registerHotRoutes, once
// everything else is on the mux.
func newAPIMux(ctx context.Context, upstream, quota, consumers grpc.ClientConnInterface, routes routeIndex, log *slog.Logger) (*runtime.ServeMux, error) {
	errs := &errorWriter{log: log, routes: routes}
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
		// A usage report asked for as CSV (Accept: text/csv, or format=csv
		// through csvFormat).
		runtime.WithMarshalerOption(csvMIME, csvMarshaler{}),
		// Metadata for the scheduler is built by package outbound; nothing
		// from the HTTP request is forwarded, and nothing the scheduler
		// sets leaks out as Grpc-Metadata-* headers.
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		// Routes are exactly the documented ones: no method override
		// header, no POST-as-GET fallback.
		runtime.WithDisableHTTPMethodOverride(),
		runtime.WithDisablePathLengthFallback(),
		runtime.WithErrorHandler(errs.grpcError),
		runtime.WithRoutingErrorHandler(errs.routingError),
		runtime.WithMiddlewares(recordRoute, requireBodyFields),
	)
	// The task service's routes are registered last, by registerHotRoutes.
	if err := taskv1.RegisterLeaseServiceHandlerClient(ctx, mux, taskv1.NewLeaseServiceClient(upstream)); err != nil {
		return nil, fmt.Errorf("rest: register lease service: %w", err)
	}
	if err := taskv1.RegisterAttemptFilesServiceHandlerClient(ctx, mux, taskv1.NewAttemptFilesServiceClient(upstream)); err != nil {
		return nil, fmt.Errorf("rest: register attempt files service: %w", err)
	}
	if err := managedv1.RegisterManagedServiceServiceHandlerClient(ctx, mux, managedv1.NewManagedServiceServiceClient(upstream)); err != nil {
		return nil, fmt.Errorf("rest: register managed service service: %w", err)
	}
	if err := managedv1.RegisterServiceAgentServiceHandlerClient(ctx, mux, managedv1.NewServiceAgentServiceClient(upstream)); err != nil {
		return nil, fmt.Errorf("rest: register service agent service: %w", err)
	}
	if err := taskv1.RegisterTaskGroupServiceHandlerClient(ctx, mux, taskv1.NewTaskGroupServiceClient(upstream)); err != nil {
		return nil, fmt.Errorf("rest: register task group service: %w", err)
	}
	if err := taskv1.RegisterTemplateServiceHandlerClient(ctx, mux, taskv1.NewTemplateServiceClient(upstream)); err != nil {
		return nil, fmt.Errorf("rest: register template service: %w", err)
	}
	if quota != nil {
		if err := quotav1.RegisterQuotaServiceHandlerClient(ctx, mux, quotav1.NewQuotaServiceClient(quota)); err != nil {
			return nil, fmt.Errorf("rest: register quota service: %w", err)
		}
		if err := quotav1.RegisterAdmissionServiceHandlerClient(ctx, mux, quotav1.NewAdmissionServiceClient(quota)); err != nil {
			return nil, fmt.Errorf("rest: register admission service: %w", err)
		}
	}
	if consumers != nil {
		if err := auditv1.RegisterAuditServiceHandlerClient(ctx, mux, auditv1.NewAuditServiceClient(consumers)); err != nil {
			return nil, fmt.Errorf("rest: register audit service: %w", err)
		}
		if err := usagev1.RegisterUsageServiceHandlerClient(ctx, mux, usagev1.NewUsageServiceClient(consumers)); err != nil {
			return nil, fmt.Errorf("rest: register usage service: %w", err)
		}
		if err := webhookv1.RegisterWebhookServiceHandlerClient(ctx, mux, webhookv1.NewWebhookServiceClient(consumers)); err != nil {
			return nil, fmt.Errorf("rest: register webhook service: %w", err)
		}
	}
	return mux, nil
}

// registerHotRoutes adds the task service's routes, the most requested
// ones, to mux. It must be the mux's last registration: grpc-gateway's
// mux tries a method's routes one by one, the last registered first, so a
// task route registered first was found only after every other route of
// its method had been tried and refused (about 35 each for GET and
// POST), which took an eighth of the gateway's own CPU per request in a
// profile of bench gateway. The order changes which route is tried first,
// never which one matches: no two services' routes overlap
// (TestServicesRoutesDoNotOverlap).
func registerHotRoutes(ctx context.Context, mux *runtime.ServeMux, upstream grpc.ClientConnInterface) error {
	if err := taskv1.RegisterTaskServiceHandlerClient(ctx, mux, taskv1.NewTaskServiceClient(upstream)); err != nil {
		return fmt.Errorf("rest: register task service: %w", err)
	}
	return nil
}

// errorWriter answers grpc-gateway's errors with the envelope.
type errorWriter struct {
	log *slog.Logger
	// routes gives a 405 its Allow header, and a validation error the
	// body's field paths.
	routes routeIndex
}

// grpcError handles every error of a routed request: the body did not
// decode (InvalidArgument from the generated code), the outbound check
// refused the call, or the scheduler answered with a status.
func (e *errorWriter) grpcError(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st := status.Convert(err)
	p := httperr.FromStatus(st)
	if p.Code == httperr.CodeInvalidArgument {
		// The request's field paths, as the body a client sent names them.
		if pattern, ok := runtime.HTTPPathPattern(ctx); ok {
			p.Message = bodyFieldPaths(p.Message, e.routes.bodyField(r.Method, pattern))
		}
	}
	switch {
	case st.Code() == codes.Unavailable:
		// A service or its database is down or restarting: every request
		// meets it, and it is no fault of the gateway's.
		outages.Log(ctx, e.log, slog.LevelWarn, "service unavailable", "method", r.Method, "path", r.URL.Path,
			"error", st.Message(), "request_id", requestid.FromContext(ctx))
	case p.HTTPStatus >= 500 && st.Code() != codes.Canceled:
		e.log.Error("internal service error", "method", r.Method, "path", r.URL.Path,
			"grpc_code", st.Code().String(), "error", st.Message(), "request_id", requestid.FromContext(ctx))
	}
	httperr.WriteFor(w, r, p)
}

// routingError handles requests the mux has no route for. They get their
// own codes, not 30004: an agent calling a route that does not exist (a
// version mismatch, a typo) must not conclude that its task is gone.
func (e *errorWriter) routingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		if allow := e.routes.allow(r.URL.Path); allow != "" {
			w.Header().Set("Allow", allow)
		}
		httperr.WriteFor(w, r, httperr.New(httpStatus, httperr.CodeMethodNotAllowed, r.Method+" not allowed on "+r.URL.Path))
	case http.StatusBadRequest:
		httperr.WriteFor(w, r, httperr.New(httpStatus, httperr.CodeInvalidArgument, "malformed request path"))
	default:
		httperr.WriteFor(w, r, httperr.New(http.StatusNotFound, httperr.CodeNoRoute, "no route for "+r.Method+" "+r.URL.Path))
	}
}
