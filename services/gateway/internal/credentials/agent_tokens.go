package credentials

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
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
// where the token may be used from; the token binds to the first address
// it is used from either way. It is RegisterAgent done by the gateway
// itself (taskmesh dev, tests). Errors: ErrInvalid, ErrNotFound (no such
// tenant), ErrExists (the agent has an active token).
func (s *Store) CreateAgentToken(ctx context.Context, agentID, tenantID string, allowedCIDRs []string, expiresAt *time.Time) (AgentToken, string, error) {
	return s.RegisterAgent(ctx, AgentSpec{AgentID: agentID, TenantID: tenantID, AllowedCIDRs: allowedCIDRs, ExpiresAt: expiresAt}, System)
}

// insertAgentToken stores a new token for spec and returns it with its
// secret. The caller holds tx and has checked spec.
func (s *Store) insertAgentToken(ctx context.Context, tx pgx.Tx, spec AgentSpec, cidrs []netip.Prefix, now time.Time) (AgentToken, string, error) {
	t := AgentToken{
		ID:           newID("atk_"),
		AgentID:      spec.AgentID,
		TenantID:     spec.TenantID,
		AllowedCIDRs: cidrs,
		CreatedAt:    pgTime(now),
		ExpiresAt:    utc(spec.ExpiresAt),
	}
	var tenant *string
	if spec.TenantID != "" {
		tenant = &spec.TenantID
	}
	for range prefixAttempts {
		bearer, prefix, hash := newSecret(agentScheme)
		// The WHERE makes the insert a no-op for an unknown tenant (see
		// CreateAPIKey). A savepoint keeps a prefix collision from
		// aborting the caller's transaction.
		var tag pgconn.CommandTag
		err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			var err error
			tag, err = sp.Exec(ctx, `
				INSERT INTO agent_tokens (id, agent_id, tenant_id, prefix, secret_hash, allowed_cidrs, created_at, expires_at)
				SELECT $1, $2, $3::text, $4, $5, $6, $7, $8
				WHERE $3::text IS NULL OR EXISTS (SELECT 1 FROM tenants WHERE id = $3::text)`,
				t.ID, t.AgentID, tenant, prefix, hash, cidrStrings(cidrs), t.CreatedAt, t.ExpiresAt)
			return err
		})
		switch {
		case pg.IsUniqueViolation(err, "agent_tokens_prefix_key"):
			continue
		case pg.IsUniqueViolation(err, "agent_tokens_active_agent_key"):
			return AgentToken{}, "", fmt.Errorf("register agent %q: %w: it has an active token; rotate or revoke it", spec.AgentID, ErrExists)
		case err != nil:
			return AgentToken{}, "", fmt.Errorf("register agent %q: %w", spec.AgentID, err)
		case tag.RowsAffected() == 0:
			return AgentToken{}, "", fmt.Errorf("register agent %q: tenant %q: %w", spec.AgentID, spec.TenantID, ErrNotFound)
		}
		t.Prefix = prefix
		return t, bearer, nil
	}
	return AgentToken{}, "", fmt.Errorf("register agent %q: no free prefix after %d attempts", spec.AgentID, prefixAttempts)
}

// RotateAgentToken gives the token a new secret and returns it; the old
// secret stops working at once on this gateway and within KeyCacheTTL on
// the others. The address binding is cleared so the new
// secret binds to the first address it is used from (rotation is how an
// operator re-issues a token to an agent that moved). Expiry and allowed
// CIDRs are kept. It is RotateAgent done by the gateway itself. Errors:
// ErrNotFound, ErrRevoked.
func (s *Store) RotateAgentToken(ctx context.Context, tokenID string) (AgentToken, string, error) {
	return s.rotateAgentToken(ctx, tokenID, nil, System)
}

func (s *Store) rotateAgentToken(ctx context.Context, tokenID string, expiresAt *time.Time, by Actor) (AgentToken, string, error) {
	now := s.now()
	if expiresAt != nil && !expiresAt.After(now) {
		return AgentToken{}, "", fmt.Errorf("rotate agent token %s: %w", tokenID, invalidField("expires_at", "%s is not in the future", expiresAt.Format(time.RFC3339)))
	}
	agentID, err := s.agentOfToken(ctx, tokenID)
	if err != nil {
		return AgentToken{}, "", fmt.Errorf("rotate agent token %s: %w", tokenID, err)
	}
	for range prefixAttempts {
		bearer, prefix, hash := newSecret(agentScheme)
		var t AgentToken
		err := s.inCommand(ctx, AggregateAgent, agentID, func(tx pgx.Tx) error {
			var err error
			t, err = scanAgentToken(tx.QueryRow(ctx, `
				UPDATE agent_tokens AS a SET prefix = $2, secret_hash = $3, rotated_at = $4, bound_ip = NULL,
					expires_at = coalesce($5, a.expires_at)
				WHERE id = $1 AND revoked_at IS NULL
				RETURNING `+agentTokenColumns, tokenID, prefix, hash, now, utc(expiresAt)))
			if err != nil {
				return err
			}
			return s.recordAgentEvent(ctx, tx, AgentEvent{Action: ActionTokenRotated, AgentID: t.AgentID, Actor: by.ID, IP: by.IP,
				Details: map[string]string{"token_id": t.ID, "prefix": t.Prefix}},
				&adminv1.AdminEvent{Event: &adminv1.AdminEvent_AgentTokenRotated{AgentTokenRotated: &adminv1.AgentTokenRotated{
					TokenId: t.ID, Prefix: t.Prefix, ExpiresAt: timestamp(t.ExpiresAt)}}})
		})
		// The old secret's entries; t is zero when nothing was updated, and
		// then nothing of this token can be cached.
		if t.AgentID != "" {
			s.keys.forgetAgent(t.AgentID)
		}
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
		s.log.Info("agent token rotated", "token_id", t.ID, "agent_id", t.AgentID, "prefix", t.Prefix, "by", by.ID)
		return t, bearer, nil
	}
	return AgentToken{}, "", fmt.Errorf("rotate agent token %s: no free prefix after %d attempts", tokenID, prefixAttempts)
}

// RevokeAgentToken revokes the token; it stops working at once on this
// gateway and within KeyCacheTTL on the others. Revoking a revoked token
// succeeds and keeps the first revocation. Errors: ErrNotFound.
func (s *Store) RevokeAgentToken(ctx context.Context, tokenID string) error {
	_, err := s.revokeAgentToken(ctx, tokenID, "revoked by operator", System, nil)
	if err != nil {
		return fmt.Errorf("revoke agent token: %w", err)
	}
	return nil
}

// revokeAgentToken revokes the token if it is not revoked yet, recording
// why and by whom in the same transaction, and returns the token as it is
// after (revoked either way). details are added to the audit entry.
// Errors: ErrNotFound.
func (s *Store) revokeAgentToken(ctx context.Context, tokenID, reason string, by Actor, details map[string]string) (AgentToken, error) {
	agentID, err := s.agentOfToken(ctx, tokenID)
	if err != nil {
		return AgentToken{}, fmt.Errorf("revoke agent token %s: %w", tokenID, err)
	}
	var t AgentToken
	err = s.inCommand(ctx, AggregateAgent, agentID, func(tx pgx.Tx) error {
		var err error
		t, err = scanAgentToken(tx.QueryRow(ctx, `
			UPDATE agent_tokens AS a SET revoked_at = $2, revoked_reason = $3
			WHERE id = $1 AND revoked_at IS NULL
			RETURNING `+agentTokenColumns, tokenID, pgTime(s.now()), reason))
		if err != nil {
			return err
		}
		d := map[string]string{"token_id": t.ID, "reason": reason}
		maps.Copy(d, details)
		return s.recordAgentEvent(ctx, tx, AgentEvent{Action: ActionRevoked, AgentID: t.AgentID, Actor: by.ID, IP: by.IP, Details: d},
			&adminv1.AdminEvent{Event: &adminv1.AdminEvent_AgentRevoked{AgentRevoked: &adminv1.AgentRevoked{
				TokenId: t.ID, Reason: reason, BoundIp: details["bound_ip"], UsedFrom: details["remote_ip"]}}})
	})
	if errNoRows(err) {
		// Already revoked (keep the first revocation), or unknown. Revoked
		// by another gateway, it may still be cached here: forget it too.
		cur, gerr := s.GetAgentToken(ctx, tokenID)
		if gerr == nil {
			s.keys.forgetAgent(cur.AgentID)
		}
		return cur, gerr
	}
	if t.AgentID != "" {
		// Whether or not it committed: the cache may only shrink.
		s.keys.forgetAgent(t.AgentID)
	}
	if err != nil {
		return AgentToken{}, fmt.Errorf("revoke agent token %s: %w", tokenID, err)
	}
	if s.revoked != nil {
		s.revoked(ctx, t.AgentID)
	}
	return t, nil
}

// agentOfToken returns the agent a token was issued to, which no change
// of the token alters, so a command on the token can take the agent's lock
// before it writes (inCommand). It is "" for an unknown token: the
// command's own statement then finds nothing and says so.
func (s *Store) agentOfToken(ctx context.Context, tokenID string) (string, error) {
	var agentID string
	err := s.db.QueryRow(ctx, `SELECT agent_id FROM agent_tokens WHERE id = $1`, tokenID).Scan(&agentID)
	if errNoRows(err) {
		return "", nil
	}
	return agentID, err
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
	for i, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, invalidField(fmt.Sprintf("allowed_cidrs[%d]", i), "%q is neither a CIDR nor an IP address", s)
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
