// Package admin serves taskmesh.admin.v1.AdminService (tenants and their
// API keys) and taskmesh.admin.v1.AgentService (the agent fleet: tokens,
// drains, the audit trail, joined with the scheduler's view from the
// heartbeats), over the credential store the gateway owns. The same Server
// answers the gRPC front door (behind UnaryInterceptor) and the REST routes
// under /api/v1/admin/ (grpc-gateway's in-process handlers, behind the REST
// authenticator), so every method checks its caller and validates its
// request itself rather than trusting a chain that REST does not run.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
)

// Page sizes of ListTenants.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// Server implements adminv1.AdminServiceServer.
type Server struct {
	adminv1.UnimplementedAdminServiceServer
	store *credentials.Store
	tiers map[string]credentials.Limits
	// changed is called after limits change (the throttle's cache).
	changed func()
	v       protovalidate.Validator
	log     *slog.Logger
	// quota, when set, is told of every tenant created or updated here.
	quota QuotaTenants
}

// QuotaTenants registers tenants with the quota service
// (quotav1.QuotaServiceClient is one).
type QuotaTenants interface {
	RegisterTenant(ctx context.Context, in *quotav1.RegisterTenantRequest, opts ...grpc.CallOption) (*quotav1.RegisterTenantResponse, error)
}

// RegisterTenantsWith makes the quota service learn every tenant this
// server creates or updates, under the same id and name. The quota service
// keeps its own tenants (docs/api/quota.md); without this a tenant created
// through the admin API would be unknown there (31004), and no GU or CU
// quota could be produced for it until an operator also registered it
// with PUT /api/v1/tenants/{tenant_id}.
func (s *Server) RegisterTenantsWith(q QuotaTenants) { s.quota = q }

// quotaRegisterTimeout bounds the quota service's registration of a tenant.
const quotaRegisterTimeout = 10 * time.Second

// registerQuotaTenant tells the quota service of tenant t, as the calling
// operator. The tenant is already stored, so a failure does not undo or
// fail the admin call: it is logged, and registering again is safe — any
// UpdateTenant of the tenant, or PUT /api/v1/tenants/{tenant_id}, does it.
func (s *Server) registerQuotaTenant(ctx context.Context, t credentials.Tenant) {
	if s.quota == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, quotaRegisterTimeout)
	defer cancel()
	if _, err := s.quota.RegisterTenant(ctx, &quotav1.RegisterTenantRequest{TenantId: t.ID, Name: t.Name}); err != nil {
		s.log.WarnContext(ctx, "the quota service did not register the tenant; update the tenant to try again",
			"tenant_id", t.ID, "err", err)
	}
}

// New returns the admin service on store. tiers are the default limits by
// tier, shown as a tenant's effective limits when it has none of its own;
// changed, if not nil, is called after a tenant's limits or tier change.
func New(store *credentials.Store, tiers map[string]credentials.Limits, changed func(), log *slog.Logger) (*Server, error) {
	v := protovalidate.GlobalValidator // shared by the process (docs/decisions/0129-one-openapi-document-and-validator-per-process.md)
	if log == nil {
		log = slog.Default()
	}
	if changed == nil {
		changed = func() {}
	}
	return &Server{store: store, tiers: tiers, changed: changed, v: v, log: log}, nil
}

// check admits only operators and validates req.
func (s *Server) check(ctx context.Context, req proto.Message) error {
	return checkOperator(ctx, s.v, req, s.log)
}

// checkOperator admits only operators and validates req.
func checkOperator(ctx context.Context, v protovalidate.Validator, req proto.Message, log *slog.Logger) error {
	p, ok := authn.FromContext(ctx)
	if !ok {
		return grpcserver.Status(codes.Unauthenticated, 401, "UNAUTHENTICATED", "missing credentials")
	}
	if p.Kind != authn.KindAdmin {
		return grpcserver.Status(codes.PermissionDenied, 403, "PERMISSION_DENIED", "the admin API needs an operator key (tmo_…)")
	}
	return grpcserver.Validate(v, req, log)
}

// CreateTenant implements AdminService.
func (s *Server) CreateTenant(ctx context.Context, req *adminv1.CreateTenantRequest) (*adminv1.CreateTenantResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	t, err := s.store.AddTenant(ctx, credentials.TenantSpec{
		ID: req.GetTenantId(), Name: req.GetName(), Tier: req.GetTier(),
		Limits: credentials.Limits{RPM: int(req.GetRpmLimit()), TPM: int(req.GetTpmLimit())}, By: actor(ctx),
	})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	s.audit(ctx, "tenant created", "tenant_id", t.ID)
	s.registerQuotaTenant(ctx, t)
	return &adminv1.CreateTenantResponse{Tenant: s.tenant(t)}, nil
}

// ListTenants implements AdminService. The page token is the last id of
// the previous page.
func (s *Server) ListTenants(ctx context.Context, req *adminv1.ListTenantsRequest) (*adminv1.ListTenantsResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultPageSize
	}
	size = min(size, maxPageSize)
	ts, next, err := s.store.ListTenants(ctx, req.GetPageToken(), size)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	resp := &adminv1.ListTenantsResponse{Tenants: make([]*adminv1.Tenant, 0, len(ts)), NextPageToken: next}
	for _, t := range ts {
		resp.Tenants = append(resp.Tenants, s.tenant(t))
	}
	return resp, nil
}

// GetTenant implements AdminService.
func (s *Server) GetTenant(ctx context.Context, req *adminv1.GetTenantRequest) (*adminv1.GetTenantResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	t, err := s.store.GetTenant(ctx, req.GetTenantId())
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &adminv1.GetTenantResponse{Tenant: s.tenant(t)}, nil
}

// UpdateTenant implements AdminService.
func (s *Server) UpdateTenant(ctx context.Context, req *adminv1.UpdateTenantRequest) (*adminv1.UpdateTenantResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	u := credentials.TenantUpdate{Name: req.Name, Tier: req.Tier, By: actor(ctx)}
	if req.RpmLimit != nil {
		n := int(req.GetRpmLimit())
		u.RPM = &n
	}
	if req.TpmLimit != nil {
		n := int(req.GetTpmLimit())
		u.TPM = &n
	}
	t, err := s.store.UpdateTenant(ctx, req.GetTenantId(), u)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	s.changed()
	s.audit(ctx, "tenant updated", "tenant_id", t.ID)
	// A rename reaches the quota service; any update also registers a
	// tenant whose registration failed when it was created.
	s.registerQuotaTenant(ctx, t)
	return &adminv1.UpdateTenantResponse{Tenant: s.tenant(t)}, nil
}

// CreateApiKey implements AdminService. A key's own limits may not exceed
// its tenant's effective ones: such a limit could never be reached.
func (s *Server) CreateApiKey(ctx context.Context, req *adminv1.CreateApiKeyRequest) (*adminv1.CreateApiKeyResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	t, err := s.store.GetTenant(ctx, req.GetTenantId())
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	eff := s.effective(t)
	for _, l := range []struct {
		name      string
		key, tent int
	}{{"rpm_limit", int(req.GetRpmLimit()), eff.RPM}, {"tpm_limit", int(req.GetTpmLimit()), eff.TPM}} {
		if l.key > 0 && l.tent > 0 && l.key > l.tent {
			return nil, s.fail(ctx, fmt.Errorf("%w: %s %d exceeds the tenant's %d", credentials.ErrInvalid, l.name, l.key, l.tent))
		}
	}
	spec := credentials.APIKeySpec{
		TenantID: req.GetTenantId(), Name: req.GetName(),
		Limits: credentials.Limits{RPM: int(req.GetRpmLimit()), TPM: int(req.GetTpmLimit())}, By: actor(ctx),
	}
	if req.ExpiresAt != nil {
		if err := req.GetExpiresAt().CheckValid(); err != nil {
			return nil, s.fail(ctx, fmt.Errorf("%w: expires_at: %v", credentials.ErrInvalid, err))
		}
		at := req.GetExpiresAt().AsTime()
		spec.ExpiresAt = &at
	}
	k, secret, err := s.store.AddAPIKey(ctx, spec)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	s.audit(ctx, "api key created", "tenant_id", k.TenantID, "key_id", k.ID, "prefix", k.Prefix)
	return &adminv1.CreateApiKeyResponse{ApiKey: apiKey(k), Secret: secret}, nil
}

// ListApiKeys implements AdminService.
func (s *Server) ListApiKeys(ctx context.Context, req *adminv1.ListApiKeysRequest) (*adminv1.ListApiKeysResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	ks, err := s.store.ListAPIKeys(ctx, req.GetTenantId())
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	resp := &adminv1.ListApiKeysResponse{ApiKeys: make([]*adminv1.ApiKey, 0, len(ks))}
	for _, k := range ks {
		resp.ApiKeys = append(resp.ApiKeys, apiKey(k))
	}
	return resp, nil
}

// RevokeApiKey implements AdminService.
func (s *Server) RevokeApiKey(ctx context.Context, req *adminv1.RevokeApiKeyRequest) (*adminv1.RevokeApiKeyResponse, error) {
	if err := s.check(ctx, req); err != nil {
		return nil, err
	}
	if err := s.store.RevokeAPIKey(ctx, req.GetTenantId(), req.GetKeyId(), actor(ctx)); err != nil {
		return nil, s.fail(ctx, err)
	}
	k, err := s.store.GetAPIKey(ctx, req.GetTenantId(), req.GetKeyId())
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	s.audit(ctx, "api key revoked", "tenant_id", k.TenantID, "key_id", k.ID, "prefix", k.Prefix)
	return &adminv1.RevokeApiKeyResponse{ApiKey: apiKey(k)}, nil
}

// fail maps a store error to a status, once for both transports: REST
// shows the business code, which for these errors is the HTTP status.
func (s *Server) fail(ctx context.Context, err error) error {
	return storeStatus(ctx, s.log, err)
}

// storeStatus maps an error of the credential store to a status.
func storeStatus(ctx context.Context, log *slog.Logger, err error) error {
	switch {
	case errors.Is(err, credentials.ErrInvalid):
		// The field, when the store names one, is a violation as the
		// protos' own rules give, so a client reads both the same way.
		var fields []*errdetails.BadRequest_FieldViolation
		if fe, ok := errors.AsType[*credentials.FieldError](err); ok {
			fields = append(fields, &errdetails.BadRequest_FieldViolation{Field: fe.Field, Description: fe.Field + ": " + fe.Reason})
		}
		return grpcserver.Status(codes.InvalidArgument, grpcserver.CodeInvalidArgument, "INVALID_ARGUMENT", err.Error(), fields...)
	case errors.Is(err, credentials.ErrNotFound):
		return grpcserver.Status(codes.NotFound, 404, "NOT_FOUND", err.Error())
	case errors.Is(err, credentials.ErrExists):
		return grpcserver.Status(codes.AlreadyExists, 409, "ALREADY_EXISTS", err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return grpcserver.Status(codes.Canceled, grpcserver.CodeInternal, "CANCELED", "request canceled")
	}
	log.ErrorContext(ctx, "admin request failed", "err", err)
	return grpcserver.Status(codes.Unavailable, grpcserver.CodeInternal, "UNAVAILABLE", "credential store unavailable")
}

// audit logs an operator's change with the operator's key id (the audit
// log's entry comes from the change's admin event, docs/api/audit.md).
func (s *Server) audit(ctx context.Context, msg string, args ...any) {
	p, _ := authn.FromContext(ctx)
	s.log.InfoContext(ctx, msg, append(args, "admin_key_id", p.Subject)...)
}

// effective is the tenant's limits in force: its own, else its tier's.
func (s *Server) effective(t credentials.Tenant) credentials.Limits {
	l, def := t.Limits, s.tiers[t.Tier]
	if l.RPM == 0 {
		l.RPM = def.RPM
	}
	if l.TPM == 0 {
		l.TPM = def.TPM
	}
	return l
}

func (s *Server) tenant(t credentials.Tenant) *adminv1.Tenant {
	eff := s.effective(t)
	return &adminv1.Tenant{
		Id: t.ID, Name: t.Name, Tier: t.Tier,
		RpmLimit: int32(t.Limits.RPM), TpmLimit: int32(t.Limits.TPM),
		EffectiveRpmLimit: int32(eff.RPM), EffectiveTpmLimit: int32(eff.TPM),
		CreatedAt: timestamppb.New(t.CreatedAt), UpdatedAt: timestamppb.New(t.UpdatedAt),
	}
}

func apiKey(k credentials.APIKey) *adminv1.ApiKey {
	return &adminv1.ApiKey{
		Id: k.ID, TenantId: k.TenantID, Name: k.Name, Prefix: k.Prefix,
		RpmLimit: int32(k.Limits.RPM), TpmLimit: int32(k.Limits.TPM),
		CreatedAt: timestamppb.New(k.CreatedAt), ExpiresAt: ts(k.ExpiresAt),
		RevokedAt: ts(k.RevokedAt), LastUsedAt: ts(k.LastUsedAt),
	}
}

// jsonObject renders details as a JSON object (the audit log's details).
func jsonObject(details map[string]string) (string, error) {
	if details == nil {
		return "{}", nil
	}
	b, err := json.Marshal(details)
	return string(b), err
}

func ts(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}
