package credentials

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
)

// dummyHash is compared against when no row matches a prefix, so a lookup
// miss costs the same compare as a hit.
var dummyHash = make([]byte, 32)

// lastUsedGranularity is how stale a key's last_used_at may be: the column
// is written at most once per this period per key, so that using a key
// costs no write on most requests.
const lastUsedGranularity = time.Minute

// Authenticate checks a bearer string (without the "Bearer " scheme) used
// from remoteIP and returns the caller: an API key gives a user principal of
// its tenant, an agent token an agent principal, an operator key an admin
// principal (no tenant). Errors: an *AuthError
// wrapping ErrUnauthenticated (malformed, unknown, wrong, expired, revoked)
// or ErrForbidden (an agent token used from an address it may not be used
// from); any other error is a database failure.
//
// An agent token used from an address it may not be used from is revoked
// before the error is returned (see checkAgentAddress; ForHeartbeat marks
// the calls that may move it within its allowed CIDRs).
//
// An API key that authenticated, and an agent token that authenticated
// from the address it is bound to, are taken on trust for KeyCacheTTL
// (keyCache); operator keys are looked up on every call.
func (s *Store) Authenticate(ctx context.Context, bearer, remoteIP string) (authn.Principal, error) {
	kind, prefix, ok := parseBearer(bearer)
	if !ok {
		return authn.Principal{}, unauthenticated("malformed bearer token")
	}
	hash := hashBearer(bearer)
	switch kind {
	case kindAgent:
		return s.authenticateAgent(ctx, prefix, hash, remoteIP)
	case kindAdmin:
		return s.authenticateAdmin(ctx, prefix, hash, remoteIP)
	}
	return s.authenticateUser(ctx, prefix, hash, remoteIP)
}

func (s *Store) authenticateUser(ctx context.Context, prefix string, hash []byte, remoteIP string) (authn.Principal, error) {
	if p, ok := s.keys.get(userCacheKey(hash), s.now()); ok {
		p.RemoteIP = canonicalIP(remoteIP)
		return p, nil
	}
	gen := s.keys.generation()
	var (
		keyID, tenantID, tier          string
		stored                         []byte
		expiresAt, revokedAt, lastUsed *time.Time
	)
	err := s.db.QueryRow(ctx, `
		SELECT k.id, k.tenant_id, t.tier, k.secret_hash, k.expires_at, k.revoked_at, k.last_used_at
		FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
		WHERE k.prefix = $1`, prefix).Scan(&keyID, &tenantID, &tier, &stored, &expiresAt, &revokedAt, &lastUsed)
	if errNoRows(err) {
		subtle.ConstantTimeCompare(hash, dummyHash)
		return authn.Principal{}, unauthenticated("invalid api key")
	}
	if err != nil {
		return authn.Principal{}, fmt.Errorf("authenticate api key %s: %w", prefix, err)
	}
	if subtle.ConstantTimeCompare(hash, stored) != 1 {
		return authn.Principal{}, unauthenticated("invalid api key")
	}
	// Past this point the caller holds the real secret, so the reasons can
	// be specific.
	if revokedAt != nil {
		return authn.Principal{}, unauthenticated("api key revoked")
	}
	now := s.now()
	if expiresAt != nil && !now.Before(*expiresAt) {
		return authn.Principal{}, unauthenticated("api key expired")
	}
	s.touch(ctx, "api_keys", keyID, lastUsed, now)
	p := authn.Principal{Kind: authn.KindUser, TenantID: tenantID, Subject: keyID, Tier: tier}
	s.keys.put(gen, userCacheKey(hash), p, now, expiresAt)
	p.RemoteIP = canonicalIP(remoteIP)
	return p, nil
}

func (s *Store) authenticateAdmin(ctx context.Context, prefix string, hash []byte, remoteIP string) (authn.Principal, error) {
	var (
		keyID                          string
		stored                         []byte
		expiresAt, revokedAt, lastUsed *time.Time
	)
	err := s.db.QueryRow(ctx, `
		SELECT id, secret_hash, expires_at, revoked_at, last_used_at FROM admin_keys WHERE prefix = $1`,
		prefix).Scan(&keyID, &stored, &expiresAt, &revokedAt, &lastUsed)
	if errNoRows(err) {
		subtle.ConstantTimeCompare(hash, dummyHash)
		return authn.Principal{}, unauthenticated("invalid admin key")
	}
	if err != nil {
		return authn.Principal{}, fmt.Errorf("authenticate admin key %s: %w", prefix, err)
	}
	if subtle.ConstantTimeCompare(hash, stored) != 1 {
		return authn.Principal{}, unauthenticated("invalid admin key")
	}
	if revokedAt != nil {
		return authn.Principal{}, unauthenticated("admin key revoked")
	}
	now := s.now()
	if expiresAt != nil && !now.Before(*expiresAt) {
		return authn.Principal{}, unauthenticated("admin key expired")
	}
	s.touch(ctx, "admin_keys", keyID, lastUsed, now)
	return authn.Principal{Kind: authn.KindAdmin, Subject: keyID, RemoteIP: canonicalIP(remoteIP)}, nil
}

// touch records that a key was used now, unless its last_used_at is less
// than lastUsedGranularity old. A failure is logged, not returned: the
// caller has been authenticated, and a missed timestamp is not worth
// refusing the request.
func (s *Store) touch(ctx context.Context, table, keyID string, lastUsed *time.Time, now time.Time) {
	if lastUsed != nil && now.Sub(*lastUsed) < lastUsedGranularity {
		return
	}
	// The condition repeats the check, so that concurrent first requests
	// of a minute write once.
	_, err := s.db.Exec(ctx, `UPDATE `+table+` SET last_used_at = $2
		WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $3)`,
		keyID, pgTime(now), pgTime(now.Add(-lastUsedGranularity)))
	if err != nil {
		s.log.Warn("recording when a key was last used failed", "table", table, "key_id", keyID, "err", err)
	}
}

// authenticateAgent checks an agent token used from remoteIP. A token that
// authenticated from the address it is bound to is cached under that
// address (agentCacheKey): the same secret from the same address finds
// it, heartbeat or not, since the full path would accept it there and
// change nothing; from any other address it misses and the full path
// refuses, revokes or moves the token as checkAgentAddress decides.
func (s *Store) authenticateAgent(ctx context.Context, prefix string, hash []byte, remoteIP string) (authn.Principal, error) {
	ip, ipErr := netip.ParseAddr(remoteIP)
	ip = ip.Unmap().WithZone("")
	if ipErr == nil {
		if p, ok := s.keys.get(agentCacheKey(hash, ip), s.now()); ok {
			p.RemoteIP = ip.String()
			return p, nil
		}
	}
	gen := s.keys.generation()
	var (
		tier   string
		stored []byte
	)
	row := s.db.QueryRow(ctx, `
		SELECT `+agentTokenColumns+`, coalesce(t.tier, ''), a.secret_hash
		FROM agent_tokens a LEFT JOIN tenants t ON t.id = a.tenant_id
		WHERE a.prefix = $1`, prefix)
	tok, err := scanAgentToken(scanTail{row, []any{&tier, &stored}})
	if errNoRows(err) {
		subtle.ConstantTimeCompare(hash, dummyHash)
		return authn.Principal{}, unauthenticated("invalid agent token")
	}
	if err != nil {
		return authn.Principal{}, fmt.Errorf("authenticate agent token %s: %w", prefix, err)
	}
	if subtle.ConstantTimeCompare(hash, stored) != 1 {
		return authn.Principal{}, unauthenticated("invalid agent token")
	}
	if tok.RevokedAt != nil {
		return authn.Principal{}, unauthenticated("agent token revoked")
	}
	now := s.now()
	if tok.ExpiresAt != nil && !now.Before(*tok.ExpiresAt) {
		return authn.Principal{}, unauthenticated("agent token expired")
	}
	if ipErr != nil {
		// Without an address neither an allow-list nor a binding can be
		// checked; refuse rather than guess.
		return authn.Principal{}, forbidden("remote address unknown")
	}
	boundHere, err := s.checkAgentAddress(ctx, tok, ip)
	if err != nil {
		return authn.Principal{}, err
	}
	p := authn.Principal{
		Kind:     authn.KindAgent,
		TenantID: tok.TenantID,
		Subject:  tok.AgentID,
		AgentID:  tok.AgentID,
		Tier:     tier,
	}
	if boundHere {
		s.keys.put(gen, agentCacheKey(hash, ip), p, now, tok.ExpiresAt)
	}
	p.RemoteIP = ip.String()
	return p, nil
}

// heartbeatKey marks a context whose request is an agent's heartbeat.
type heartbeatKey struct{}

// ForHeartbeat marks ctx as the context of an agent's machine heartbeat
// (REST POST /api/v1/agent/heartbeat, gRPC LeaseService.SendHeartbeat):
// the one call through which an agent token's address may change (see
// checkAgentAddress).
func ForHeartbeat(ctx context.Context) context.Context {
	return context.WithValue(ctx, heartbeatKey{}, true)
}

func isHeartbeat(ctx context.Context) bool {
	v, _ := ctx.Value(heartbeatKey{}).(bool)
	return v
}

// checkAgentAddress enforces the address rules of agent tokens
// (docs/api/admin.md#agents): a token binds to the first address it is
// used from, which must be inside its allowed CIDRs when it has any. Use
// from another address revokes it (the secret has leaked), except that an
// agent with allowed CIDRs may move inside them: its heartbeat from the
// new address moves the binding, and until that heartbeat its other calls
// from there are refused without revoking (a NAT's new address may reach
// a claim before the heartbeat). Every revocation and move is recorded in
// the agent's audit trail in the same transaction.
//
// boundHere reports an acceptance that may be cached under ip: the token
// was bound to ip already, or has just been bound to it by this call. A
// move is accepted but not cached (it forgets the agent's entries).
func (s *Store) checkAgentAddress(ctx context.Context, tok AgentToken, ip netip.Addr) (boundHere bool, err error) {
	if len(tok.AllowedCIDRs) > 0 && !slices.ContainsFunc(tok.AllowedCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
		return false, s.revokeForAddress(ctx, tok, ip, fmt.Sprintf("used from %s, outside its allowed CIDRs %v", ip, cidrStrings(tok.AllowedCIDRs)))
	}
	bound := tok.BoundIP
	if !bound.IsValid() {
		// Bind atomically: of two first uses racing from different
		// addresses exactly one binds, the other sees the binding below. The
		// prefix condition keeps a rotation that happened since the lookup
		// from being bound by the old secret.
		tag, err := s.db.Exec(ctx, `
			UPDATE agent_tokens SET bound_ip = $3
			WHERE id = $1 AND prefix = $2 AND bound_ip IS NULL AND revoked_at IS NULL`,
			tok.ID, tok.Prefix, ip.String())
		if err != nil {
			return false, fmt.Errorf("bind agent token %s: %w", tok.ID, err)
		}
		if tag.RowsAffected() == 1 {
			// Nothing cached goes stale: entries are made only under the
			// address a secret is bound to, and this secret had none (a
			// rotation, which clears the binding, changes the secret and
			// forgets the old one's entries).
			s.log.Info("agent token bound to its first address",
				"token_id", tok.ID, "agent_id", tok.AgentID, "remote_ip", ip.String())
			return true, nil
		}
		now, err := s.GetAgentToken(ctx, tok.ID)
		if err != nil {
			return false, fmt.Errorf("bind agent token %s: %w", tok.ID, err)
		}
		if now.Prefix != tok.Prefix || now.RevokedAt != nil || !now.BoundIP.IsValid() {
			return false, unauthenticated("agent token revoked")
		}
		bound, tok.BoundIP = now.BoundIP, now.BoundIP
	}
	switch {
	case bound == ip:
		return true, nil
	case len(tok.AllowedCIDRs) == 0:
		return false, s.revokeForAddress(ctx, tok, ip, fmt.Sprintf("used from %s while bound to %s", ip, bound))
	case isHeartbeat(ctx):
		return false, s.moveAgentAddress(ctx, tok, bound, ip)
	}
	s.log.Info("agent call refused: its address changed; its next heartbeat moves the token",
		"token_id", tok.ID, "agent_id", tok.AgentID, "bound_ip", bound.String(), "remote_ip", ip.String())
	return false, forbidden("agent address changed: send a heartbeat from the new address first")
}

// moveAgentAddress moves the token's binding from bound to ip on a
// heartbeat, recording it, and forgets the agent's cached entries (the one
// under bound among them). A concurrent change of the binding wins: the
// heartbeat is refused and the agent's next one decides again.
func (s *Store) moveAgentAddress(ctx context.Context, tok AgentToken, bound, ip netip.Addr) error {
	moved := false
	err := s.inCommand(ctx, AggregateAgent, tok.AgentID, func(tx pgx.Tx) error {
		moved = false
		tag, err := tx.Exec(ctx, `UPDATE agent_tokens SET bound_ip = $4
			WHERE id = $1 AND prefix = $2 AND bound_ip = $3 AND revoked_at IS NULL`, tok.ID, tok.Prefix, bound.String(), ip.String())
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		moved = true
		return s.recordAgentEvent(ctx, tx, AgentEvent{Action: ActionAddressChanged, AgentID: tok.AgentID, Actor: System.ID, IP: ip.String(),
			Details: map[string]string{"token_id": tok.ID, "from": bound.String(), "to": ip.String()}},
			&adminv1.AdminEvent{Event: &adminv1.AdminEvent_AgentAddressChanged{AgentAddressChanged: &adminv1.AgentAddressChanged{
				TokenId: tok.ID, From: bound.String(), To: ip.String()}}})
	})
	s.keys.forgetAgent(tok.AgentID)
	if err != nil {
		return fmt.Errorf("move agent token %s to %s: %w", tok.ID, ip, err)
	}
	if !moved {
		return forbidden("agent address changed concurrently; retry")
	}
	s.log.Info("agent address changed through its heartbeat",
		"token_id", tok.ID, "agent_id", tok.AgentID, "from", bound.String(), "to", ip.String())
	return nil
}

// revokeForAddress revokes a token used from where it may not be, records
// why, and returns the refusal. (revokeAgentToken forgets the agent's
// cached entries.)
func (s *Store) revokeForAddress(ctx context.Context, tok AgentToken, ip netip.Addr, reason string) error {
	details := map[string]string{"remote_ip": ip.String()}
	if tok.BoundIP.IsValid() {
		details["bound_ip"] = tok.BoundIP.String()
	}
	if _, err := s.revokeAgentToken(ctx, tok.ID, reason, Actor{ID: System.ID, IP: ip.String()}, details); err != nil {
		return fmt.Errorf("revoke agent token %s after use from a foreign address: %w", tok.ID, err)
	}
	s.log.Warn("agent token revoked: used from an address it may not be used from",
		"token_id", tok.ID, "agent_id", tok.AgentID, "bound_ip", tok.BoundIP.String(), "remote_ip", ip.String(), "reason", reason)
	return forbidden("agent token used from an unexpected address; it has been revoked")
}

// canonicalIP returns addr in canonical form (IPv4-mapped IPv6 unmapped),
// or addr unchanged when it does not parse.
func canonicalIP(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	return ip.Unmap().WithZone("").String()
}

// scanTail scans a row whose leading columns are agentTokenColumns followed
// by extra columns into extra.
type scanTail struct {
	row   interface{ Scan(...any) error }
	extra []any
}

func (s scanTail) Scan(dest ...any) error { return s.row.Scan(append(dest, s.extra...)...) }
