package gateway

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/gateway/internal/credentials"
)

// Credentials manages and checks tenants, API keys and agent tokens in the
// gateway's schema. Secrets are random, shown once, and stored only as
// SHA-256 hashes found through a non-secret prefix; see the methods for
// their errors:
//
//	CreateTenant(ctx, id, name, tier) (Tenant, error)
//	AddTenant(ctx, TenantSpec) (Tenant, error)                             // with RPM/TPM limits
//	UpdateTenant(ctx, id, TenantUpdate) (Tenant, error)
//	AddAPIKey(ctx, APIKeySpec) (APIKey, secret, error)                     // with RPM/TPM limits
//	BootstrapAdminKey(ctx, name) (AdminKey, secret, created, error)        // "tmo_…", only if none is usable
//	CreateAdminKey(ctx, name, expiresAt) (AdminKey, secret, error)
//	CreateAPIKey(ctx, tenantID, name, expiresAt) (APIKey, secret, error)   // secret "tm_<prefix>_<secret>"
//	RevokeAPIKey(ctx, tenantID, keyID) error
//	ListAPIKeys(ctx, tenantID) ([]APIKey, error)                           // never secrets or hashes
//	CreateAgentToken(ctx, agentID, tenantID, allowedCIDRs, expiresAt) (AgentToken, secret, error) // "tma_…"
//	RotateAgentToken(ctx, tokenID) (AgentToken, secret, error)
//	RevokeAgentToken(ctx, tokenID) error
//	GetAgentToken(ctx, tokenID) (AgentToken, error)
//	Authenticate(ctx, bearer, remoteIP) (authn.Principal, error)          // *AuthError: ErrUnauthenticated or ErrForbidden
//
// An agent token without allowed CIDRs binds to the first address it is used
// from; use from another address is refused (ErrForbidden) and revokes it.
type Credentials = credentials.Store

// Credential records; none carries a secret.
type (
	Tenant     = credentials.Tenant
	APIKey     = credentials.APIKey
	AgentToken = credentials.AgentToken
	// AdminKey is an operator key (tmo_…): it may call the admin API and
	// nothing else.
	AdminKey = credentials.AdminKey
	// TenantSpec, TenantUpdate and APIKeySpec are the arguments of
	// AddTenant, UpdateTenant and AddAPIKey (with rate limits).
	TenantSpec   = credentials.TenantSpec
	TenantUpdate = credentials.TenantUpdate
	APIKeySpec   = credentials.APIKeySpec
	// AuthError is the error of Authenticate: Kind is ErrUnauthenticated or
	// ErrForbidden, Reason is safe to show the caller.
	AuthError = credentials.AuthError
)

// Tenant tiers.
const (
	TierPremium  = credentials.TierPremium
	TierStandard = credentials.TierStandard
)

// Errors of Credentials (test with errors.Is).
var (
	// ErrUnauthenticated: missing, malformed, unknown, wrong, expired or
	// revoked secret.
	ErrUnauthenticated = credentials.ErrUnauthenticated
	// ErrForbidden: an agent token used from an address it may not be used
	// from.
	ErrForbidden = credentials.ErrForbidden
	// ErrInvalid: a malformed argument to a management method.
	ErrInvalid = credentials.ErrInvalid
	// ErrNotFound: no such tenant, key or token.
	ErrNotFound = credentials.ErrNotFound
	// ErrExists: the tenant already exists.
	ErrExists = credentials.ErrExists
	// ErrRevoked: a revoked token cannot be rotated.
	ErrRevoked = credentials.ErrRevoked
)

// NewCredentials returns the credential store on db (search_path starting
// with the gateway's schema). now is the clock (time.Now if nil). Security
// events are logged to slog.Default; a Gateway's own store (Credentials())
// logs to Config.Logger.
func NewCredentials(db *pgxpool.Pool, now func() time.Time) *Credentials {
	return credentials.New(db, now, nil)
}

// Migrations returns the gateway schema (tenants, api_keys, agent_tokens).
func Migrations() pg.MigrationSet {
	return credentials.Migrations()
}
