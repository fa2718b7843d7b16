package gateway

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/eventstore"
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
//	RevokeAPIKey(ctx, tenantID, keyID, Actor) error                       // every change is an admin event (docs/events.md)
//	ListAPIKeys(ctx, tenantID) ([]APIKey, error)                           // never secrets or hashes
//	RegisterAgent(ctx, AgentSpec, Actor) (AgentToken, secret, error)       // "tma_…"; audited
//	CreateAgentToken(ctx, agentID, tenantID, allowedCIDRs, expiresAt) (AgentToken, secret, error) // RegisterAgent by the gateway
//	Agent(ctx, agentID) (AgentToken, error)                               // the agent's current token
//	ListAgents(ctx, AgentFilter) ([]AgentToken, error)
//	RotateAgent(ctx, agentID, expiresAt, Actor) (AgentToken, secret, error)
//	RevokeAgent(ctx, agentID, reason, Actor) (AgentToken, error)
//	RotateAgentToken(ctx, tokenID) (AgentToken, secret, error)
//	RevokeAgentToken(ctx, tokenID) error
//	GetAgentToken(ctx, tokenID) (AgentToken, error)
//	AgentEvents(ctx, agentID, limit) ([]AgentEvent, error)                // the audit trail, newest first
//	Authenticate(ctx, bearer, remoteIP) (authn.Principal, error)          // *AuthError: ErrUnauthenticated or ErrForbidden
//
// An agent token binds to the first address it is used from (inside its
// allowed CIDRs, when it has any); use from another address is refused
// (ErrForbidden) and revokes it, except a move within the allowed CIDRs
// announced by the agent's heartbeat (docs/api/admin.md#agents).
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
	// AgentSpec, AgentFilter, AgentEvent and Actor are the agent fleet's
	// arguments and audit entries.
	AgentSpec   = credentials.AgentSpec
	AgentFilter = credentials.AgentFilter
	AgentEvent  = credentials.AgentEvent
	Actor       = credentials.Actor
)

// SystemActor is the gateway acting on its own in an agent's audit trail.
var SystemActor = credentials.System

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
	// ErrExists: the tenant already exists, or the agent has an active
	// token.
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

// Migrations returns the gateway schema (tenants, api_keys, agent_tokens,
// and the events table the admin events are appended to, the outbox of
// the admin topic).
func Migrations() []pg.MigrationSet {
	return []pg.MigrationSet{eventstore.Migrations(), credentials.Migrations()}
}
