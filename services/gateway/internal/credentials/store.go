package credentials

import (
	"context"
	"embed"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Component is the migration component name of these tables.
const Component = "gateway_credentials"

// Migrations returns the schema of the credential tables.
func Migrations() pg.MigrationSet {
	set, err := pg.LoadMigrations(Component, migrationFiles, "migrations")
	if err != nil {
		// The files are embedded at build time; a bad name is a programming
		// error that every test run catches.
		panic(err)
	}
	return set
}

// Store manages and checks credentials in Postgres. It is safe for
// concurrent use.
type Store struct {
	db   *pgxpool.Pool
	now  func() time.Time
	log  *slog.Logger
	keys keyCache
	// revoked, if set, is told of every agent whose token was revoked
	// (see OnAgentRevoked).
	revoked func(ctx context.Context, agentID string)
}

// OnAgentRevoked makes the store call fn after each revocation of an
// agent's token has committed (by an operator, or for use from a foreign
// address), before the revoking call returns. The gateway uses it to
// drain the agent in the scheduler: a claim the agent started before the
// revocation is still waiting there and must lease nothing. Set it before
// use.
func (s *Store) OnAgentRevoked(fn func(ctx context.Context, agentID string)) { s.revoked = fn }

// New returns a Store on db, whose search_path must start with the schema
// Migrations was applied to. now is the clock (time.Now if nil); log
// receives security events such as a token revoked for use from a foreign
// address (slog.Default if nil). Secrets are never logged.
func New(db *pgxpool.Pool, now func() time.Time, log *slog.Logger) *Store {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Store{db: db, now: now, log: log}
}

// Tiers a tenant may have; the tier picks its admission queue.
const (
	TierPremium  = "premium"
	TierStandard = "standard"
)

// Tenant is a customer account.
type Tenant struct {
	ID   string
	Name string
	Tier string
	// Limits are the tenant's own; a zero field means the tier's default.
	Limits    Limits
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Limits are requests and tokens per minute. Zero means "not set": a
// tenant then gets its tier's default, a key only its tenant's limits.
type Limits struct {
	RPM int
	TPM int
}

// MaxLimit bounds every limit: one per microsecond, the finest rate the
// gateway's limiter keeps time in (a million requests or tokens a second).
const MaxLimit = 60_000_000

// check returns ErrInvalid for a negative or too large limit.
func (l Limits) check() error {
	for _, v := range []struct {
		name string
		n    int
	}{{"rpm limit", l.RPM}, {"tpm limit", l.TPM}} {
		if v.n < 0 || v.n > MaxLimit {
			return fmt.Errorf("%w: %s %d is not in [0, %d]", ErrInvalid, v.name, v.n, MaxLimit)
		}
	}
	return nil
}

// APIKey describes a tenant's API key. It never carries the secret or its
// hash.
type APIKey struct {
	ID       string
	TenantID string
	Name     string
	// Prefix is the non-secret part of the key (tm_<Prefix>_…), to tell keys
	// apart in lists and logs.
	Prefix string
	// Limits are the key's own, within its tenant's; zero fields leave
	// only the tenant's limit.
	Limits    Limits
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
	// LastUsedAt is when the key was last accepted, to the minute (see
	// lastUsedGranularity).
	LastUsedAt *time.Time
}

// AdminKey describes an operator key (tmo_…): it may call the admin API
// and nothing else. It never carries the secret or its hash.
type AdminKey struct {
	ID         string
	Name       string
	Prefix     string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	RevokedAt  *time.Time
	LastUsedAt *time.Time
}

// AgentToken describes an executor agent's token. It never carries the
// secret or its hash.
type AgentToken struct {
	ID      string
	AgentID string
	// TenantID is the tenant the agent serves; "" for the shared pool.
	TenantID string
	// Prefix is the non-secret part of the token (tma_<Prefix>_…).
	Prefix string
	// AllowedCIDRs, when not empty, are the only networks the token is
	// accepted from.
	AllowedCIDRs []netip.Prefix
	// BoundIP is the address a token without AllowedCIDRs was first used
	// from (zero until then, and again after a rotation).
	BoundIP       netip.Addr
	CreatedAt     time.Time
	ExpiresAt     *time.Time
	RotatedAt     *time.Time
	RevokedAt     *time.Time
	RevokedReason string
}

// pgTime normalizes a time the way Postgres returns it (UTC, microseconds),
// so values built here and values read back compare equal.
func pgTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// utc is pgTime for optional times.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := pgTime(*t)
	return &u
}
