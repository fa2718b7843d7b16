package credentials

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// maxAgentIDLen matches the agent_id limit of the lease API.
const maxAgentIDLen = 128

// agentTokenColumns are read by scanAgentToken, in this order.
// Qualified by the alias a, which every query on agent_tokens uses.
const agentTokenColumns = `a.id, a.agent_id, coalesce(a.tenant_id, ''), a.prefix, a.allowed_cidrs, a.bound_ip,
	a.created_at, a.expires_at, a.rotated_at, a.revoked_at, a.revoked_reason`

// CreateAgentToken issues a token for the agent and returns it with its
// secret, the bearer string "tma_<prefix>_<secret>", shown only here.
// tenantID "" makes a shared-pool agent that serves every tenant.
// allowedCIDRs ("10.0.0.0/8", or a bare address for one host) restricts
// where the token may be used from; without them the token binds to the
// first address it is used from. Errors: ErrInvalid, ErrNotFound (no such
// tenant).
func (s *Store) CreateAgentToken(ctx context.Context, agentID, tenantID string, allowedCIDRs []string, expiresAt *time.Time) (AgentToken, string, error) {
	now := s.now()
	if agentID == "" || len(agentID) > maxAgentIDLen {
		return AgentToken{}, "", fmt.Errorf("create agent token for %q: %w: agent id must be 1-%d bytes", agentID, ErrInvalid, maxAgentIDLen)
	}
	if expiresAt != nil && !expiresAt.After(now) {
		return AgentToken{}, "", fmt.Errorf("create agent token for %q: %w: expiry %s is not in the future", agentID, ErrInvalid, expiresAt.Format(time.RFC3339))
	}
	cidrs, err := parseCIDRs(allowedCIDRs)
	if err != nil {
		return AgentToken{}, "", fmt.Errorf("create agent token for %q: %w", agentID, err)
	}
	t := AgentToken{
		ID:           newID("atk_"),
		AgentID:      agentID,
		TenantID:     tenantID,
		AllowedCIDRs: cidrs,
		CreatedAt:    pgTime(now),
		ExpiresAt:    utc(expiresAt),
	}
	var tenant *string
	if tenantID != "" {
		tenant = &tenantID
	}
	for range prefixAttempts {
		bearer, prefix, hash := newSecret(agentScheme)
		// The WHERE makes the insert a no-op for an unknown tenant (see
		// CreateAPIKey).
		tag, err := s.db.Exec(ctx, `
			INSERT INTO agent_tokens (id, agent_id, tenant_id, prefix, secret_hash, allowed_cidrs, created_at, expires_at)
			SELECT $1, $2, $3::text, $4, $5, $6, $7, $8
			WHERE $3::text IS NULL OR EXISTS (SELECT 1 FROM tenants WHERE id = $3::text)`,
			t.ID, t.AgentID, tenant, prefix, hash, cidrStrings(cidrs), t.CreatedAt, t.ExpiresAt)
		if pg.IsUniqueViolation(err, "agent_tokens_prefix_key") {
			continue
		}
		if err != nil {
			return AgentToken{}, "", fmt.Errorf("create agent token for %q: %w", agentID, err)
		}
		if tag.RowsAffected() == 0 {
			return AgentToken{}, "", fmt.Errorf("create agent token for %q: tenant %q: %w", agentID, tenantID, ErrNotFound)
		}
		t.Prefix = prefix
		return t, bearer, nil
	}
	return AgentToken{}, "", fmt.Errorf("create agent token for %q: no free prefix after %d attempts", agentID, prefixAttempts)
}

// RotateAgentToken gives the token a new secret and returns it; the old
// secret stops working at once. The address binding is cleared so the new
// secret binds to the first address it is used from (rotation is how an
// operator re-issues a token to an agent that moved). Expiry and allowed
// CIDRs are kept. Errors: ErrNotFound, ErrRevoked.
func (s *Store) RotateAgentToken(ctx context.Context, tokenID string) (AgentToken, string, error) {
	now := s.now()
	for range prefixAttempts {
		bearer, prefix, hash := newSecret(agentScheme)
		row := s.db.QueryRow(ctx, `
			UPDATE agent_tokens AS a SET prefix = $2, secret_hash = $3, rotated_at = $4, bound_ip = NULL
			WHERE id = $1 AND revoked_at IS NULL
			RETURNING `+agentTokenColumns, tokenID, prefix, hash, now)
		t, err := scanAgentToken(row)
		if pg.IsUniqueViolation(err, "agent_tokens_prefix_key") {
			continue
		}
		if errNoRows(err) {
			if _, gerr := s.GetAgentToken(ctx, tokenID); gerr != nil {
				return AgentToken{}, "", fmt.Errorf("rotate agent token: %w", gerr)
			}
			return AgentToken{}, "", fmt.Errorf("rotate agent token %s: %w", tokenID, ErrRevoked)
		}
		if err != nil {
			return AgentToken{}, "", fmt.Errorf("rotate agent token %s: %w", tokenID, err)
		}
		s.log.Info("agent token rotated", "token_id", t.ID, "agent_id", t.AgentID, "prefix", t.Prefix)
		return t, bearer, nil
	}
	return AgentToken{}, "", fmt.Errorf("rotate agent token %s: no free prefix after %d attempts", tokenID, prefixAttempts)
}

// RevokeAgentToken revokes the token; it stops working at once. Revoking a
// revoked token succeeds and keeps the first revocation. Errors:
// ErrNotFound.
func (s *Store) RevokeAgentToken(ctx context.Context, tokenID string) error {
	tag, err := s.revokeAgentToken(ctx, tokenID, "revoked by operator")
	if err != nil {
		return fmt.Errorf("revoke agent token %s: %w", tokenID, err)
	}
	if tag == 0 {
		if _, err := s.GetAgentToken(ctx, tokenID); err != nil {
			return fmt.Errorf("revoke agent token: %w", err)
		}
	}
	return nil
}

// revokeAgentToken revokes the token if it is not revoked yet and returns
// how many rows changed (0 or 1).
func (s *Store) revokeAgentToken(ctx context.Context, tokenID, reason string) (int64, error) {
	tag, err := s.db.Exec(ctx, `
		UPDATE agent_tokens SET revoked_at = $2, revoked_reason = $3
		WHERE id = $1 AND revoked_at IS NULL`, tokenID, s.now(), reason)
	return tag.RowsAffected(), err
}

// GetAgentToken returns the token's description. Errors: ErrNotFound.
func (s *Store) GetAgentToken(ctx context.Context, tokenID string) (AgentToken, error) {
	t, err := scanAgentToken(s.db.QueryRow(ctx, `SELECT `+agentTokenColumns+` FROM agent_tokens a WHERE a.id = $1`, tokenID))
	if errNoRows(err) {
		return AgentToken{}, fmt.Errorf("agent token %s: %w", tokenID, ErrNotFound)
	}
	if err != nil {
		return AgentToken{}, fmt.Errorf("get agent token %s: %w", tokenID, err)
	}
	return t, nil
}

func scanAgentToken(row pgx.Row) (AgentToken, error) {
	var (
		t     AgentToken
		cidrs []string
		bound *string
	)
	err := row.Scan(&t.ID, &t.AgentID, &t.TenantID, &t.Prefix, &cidrs, &bound,
		&t.CreatedAt, &t.ExpiresAt, &t.RotatedAt, &t.RevokedAt, &t.RevokedReason)
	if err != nil {
		return AgentToken{}, err
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.ExpiresAt, t.RotatedAt, t.RevokedAt = utc(t.ExpiresAt), utc(t.RotatedAt), utc(t.RevokedAt)
	// Stored values were canonicalized on the way in; a value that no longer
	// parses would mean someone edited the table by hand, and failing the
	// read is safer than silently widening what the token accepts.
	if t.AllowedCIDRs, err = parseCIDRs(cidrs); err != nil {
		return AgentToken{}, fmt.Errorf("stored allowed_cidrs of %s: %w", t.ID, err)
	}
	if bound != nil {
		if t.BoundIP, err = netip.ParseAddr(*bound); err != nil {
			return AgentToken{}, fmt.Errorf("stored bound_ip of %s: %w", t.ID, err)
		}
	}
	return t, nil
}

// parseCIDRs parses networks ("10.0.0.0/8") and single addresses
// ("192.0.2.7", taken as /32 or /128) into canonical masked prefixes.
// IPv4-mapped IPv6 forms are unmapped so they match the addresses the
// gateway sees.
func parseCIDRs(in []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(in))
	for _, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%w: %q is neither a CIDR nor an IP address", ErrInvalid, s)
			}
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func cidrStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
