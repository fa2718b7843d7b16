package credentials

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
)

// Actions of an agent's audit trail.
const (
	ActionRegistered     = "agent.registered"
	ActionTokenRotated   = "agent.token_rotated"
	ActionRevoked        = "agent.revoked"
	ActionAddressChanged = "agent.address_changed"
	ActionDrained        = "agent.drained"
	ActionUndrained      = "agent.undrained"
)

// Actor is who made a change, for the audit trail: an operator key's id
// and address, or System.
type Actor struct {
	ID string
	IP string
}

// System is the gateway acting on its own (taskmesh dev issuing its local
// agent's token, a revocation for use from a foreign address).
var System = Actor{ID: "gateway"}

// AgentSpec is what RegisterAgent issues a token for.
type AgentSpec struct {
	AgentID string
	// TenantID is the tenant the agent serves; "" for the shared pool.
	TenantID string
	// AllowedCIDRs ("10.0.0.0/8", or a bare address) are the only networks
	// the token is accepted from; an address change within them is
	// accepted through a heartbeat. Empty: only the first address.
	AllowedCIDRs []string
	// ExpiresAt, if set, must be in the future.
	ExpiresAt *time.Time
}

// AgentEvent is one entry of an agent's audit trail.
type AgentEvent struct {
	ID      string
	At      time.Time
	Action  string
	AgentID string
	// Actor is an operator key's id, or "gateway".
	Actor   string
	IP      string
	Details map[string]string
}

// maxAgentEvents bounds one page of AgentEvents.
const maxAgentEvents = 1000

// RegisterAgent issues a token for spec.AgentID, recorded in the agent's
// audit trail, and returns it with its secret ("tma_<prefix>_<secret>"),
// shown only here. Errors: ErrInvalid, ErrNotFound (no such tenant),
// ErrExists (the agent has an active token: rotate or revoke it).
func (s *Store) RegisterAgent(ctx context.Context, spec AgentSpec, by Actor) (AgentToken, string, error) {
	now := s.now()
	if spec.AgentID == "" || len(spec.AgentID) > maxAgentIDLen {
		return AgentToken{}, "", fmt.Errorf("register agent %q: %w: agent id must be 1-%d bytes", spec.AgentID, ErrInvalid, maxAgentIDLen)
	}
	if spec.ExpiresAt != nil && !spec.ExpiresAt.After(now) {
		return AgentToken{}, "", fmt.Errorf("register agent %q: %w", spec.AgentID, invalidField("expires_at", "%s is not in the future", spec.ExpiresAt.Format(time.RFC3339)))
	}
	cidrs, err := parseCIDRs(spec.AllowedCIDRs)
	if err != nil {
		return AgentToken{}, "", fmt.Errorf("register agent %q: %w", spec.AgentID, err)
	}
	var (
		tok    AgentToken
		secret string
	)
	err = s.inCommand(ctx, AggregateAgent, spec.AgentID, func(tx pgx.Tx) error {
		var err error
		if tok, secret, err = s.insertAgentToken(ctx, tx, spec, cidrs, now); err != nil {
			return err
		}
		d := map[string]string{"token_id": tok.ID, "prefix": tok.Prefix, "tenant_id": tok.TenantID}
		if len(cidrs) > 0 {
			d["allowed_cidrs"] = fmt.Sprint(cidrStrings(cidrs))
		}
		return s.recordAgentEvent(ctx, tx, AgentEvent{Action: ActionRegistered, AgentID: tok.AgentID, Actor: by.ID, IP: by.IP, Details: d},
			&adminv1.AdminEvent{Event: &adminv1.AdminEvent_AgentRegistered{AgentRegistered: &adminv1.AgentRegistered{
				TokenId: tok.ID, Prefix: tok.Prefix, AllowedCidrs: cidrStrings(cidrs), ExpiresAt: timestamp(tok.ExpiresAt)}}})
	})
	if err != nil {
		return AgentToken{}, "", err
	}
	s.log.Info("agent registered", "agent_id", tok.AgentID, "token_id", tok.ID, "prefix", tok.Prefix, "by", by.ID)
	return tok, secret, nil
}

// Agent returns the agent's current token: the active one, else the most
// recently created. Errors: ErrNotFound.
func (s *Store) Agent(ctx context.Context, agentID string) (AgentToken, error) {
	t, err := scanAgentToken(s.db.QueryRow(ctx, `SELECT `+agentTokenColumns+` FROM agent_tokens a
		WHERE a.agent_id = $1 ORDER BY a.revoked_at IS NULL DESC, a.created_at DESC, a.id DESC LIMIT 1`, agentID))
	if errNoRows(err) {
		return AgentToken{}, fmt.Errorf("agent %s: %w", agentID, ErrNotFound)
	}
	if err != nil {
		return AgentToken{}, fmt.Errorf("get agent %s: %w", agentID, err)
	}
	return t, nil
}

// AgentFilter selects the agents of ListAgents.
type AgentFilter struct {
	// TenantID: only this tenant's agents ("" every tenant's).
	TenantID string
	// IncludeRevoked lists agents whose token is revoked too.
	IncludeRevoked bool
	// After: agent ids greater than this (the previous page's last).
	After string
	Limit int
}

// ListAgents returns each registered agent's current token (see Agent), by
// agent id.
func (s *Store) ListAgents(ctx context.Context, f AgentFilter) ([]AgentToken, error) {
	rows, err := s.db.Query(ctx, `
		SELECT * FROM (
			SELECT DISTINCT ON (a.agent_id) `+agentTokenColumns+` FROM agent_tokens a
			WHERE a.agent_id > $1::text AND ($2::text = '' OR a.tenant_id = $2::text)
			ORDER BY a.agent_id, a.revoked_at IS NULL DESC, a.created_at DESC, a.id DESC) cur
		WHERE $3::boolean OR cur.revoked_at IS NULL
		ORDER BY cur.agent_id LIMIT $4`, f.After, f.TenantID, f.IncludeRevoked, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	defer rows.Close()
	var out []AgentToken
	for rows.Next() {
		t, err := scanAgentToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list agents: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	return out, nil
}

// RotateAgent gives the agent's active token a new secret (see
// RotateAgentToken), with a new expiry when expiresAt is set, recorded in
// its audit trail. Errors: ErrNotFound, ErrRevoked, ErrInvalid.
func (s *Store) RotateAgent(ctx context.Context, agentID string, expiresAt *time.Time, by Actor) (AgentToken, string, error) {
	cur, err := s.Agent(ctx, agentID)
	if err != nil {
		return AgentToken{}, "", err
	}
	return s.rotateAgentToken(ctx, cur.ID, expiresAt, by)
}

// RevokeAgent revokes the agent's active token, recorded with reason in
// its audit trail; an agent already revoked keeps its first revocation.
// Errors: ErrNotFound.
func (s *Store) RevokeAgent(ctx context.Context, agentID, reason string, by Actor) (AgentToken, error) {
	cur, err := s.Agent(ctx, agentID)
	if err != nil {
		return AgentToken{}, err
	}
	if reason == "" {
		reason = "revoked by operator"
	}
	t, err := s.revokeAgentToken(ctx, cur.ID, reason, by, nil)
	if err != nil {
		return AgentToken{}, err
	}
	s.log.Info("agent revoked", "agent_id", t.AgentID, "token_id", t.ID, "by", by.ID, "reason", reason)
	return t, nil
}

// RecordAgentEvent adds e to the agent's audit trail and the admin events
// (changes the gateway makes elsewhere: ActionDrained and
// ActionUndrained, with the "running_tasks" detail). Errors: ErrInvalid
// for another action.
func (s *Store) RecordAgentEvent(ctx context.Context, e AgentEvent) error {
	running, _ := strconv.Atoi(e.Details["running_tasks"])
	var ev *adminv1.AdminEvent
	switch e.Action {
	case ActionDrained:
		ev = &adminv1.AdminEvent{Event: &adminv1.AdminEvent_AgentDrained{AgentDrained: &adminv1.AgentDrained{RunningTasks: int32(running)}}}
	case ActionUndrained:
		ev = &adminv1.AdminEvent{Event: &adminv1.AdminEvent_AgentUndrained{AgentUndrained: &adminv1.AgentUndrained{RunningTasks: int32(running)}}}
	default:
		return fmt.Errorf("record %s of agent %s: %w: not an action recorded from outside the store", e.Action, e.AgentID, ErrInvalid)
	}
	return s.inCommand(ctx, AggregateAgent, e.AgentID, func(tx pgx.Tx) error { return s.recordAgentEvent(ctx, tx, e, ev) })
}

// recordAgentEvent inserts e (its id and time filled in when empty) into
// the agent's trail and appends ev, its admin event, in tx, a command on
// the agent (inCommand). The admin event belongs to the tenant of the
// agent's current token.
func (s *Store) recordAgentEvent(ctx context.Context, tx pgx.Tx, e AgentEvent, ev *adminv1.AdminEvent) error {
	if e.ID == "" {
		e.ID = newID("aev_")
	}
	if e.At.IsZero() {
		e.At = s.now()
	}
	if e.Details == nil {
		e.Details = map[string]string{}
	}
	details, err := json.Marshal(e.Details)
	if err != nil {
		return fmt.Errorf("agent event details: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO agent_events (id, at, action, agent_id, actor, ip, details) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		e.ID, pgTime(e.At), e.Action, e.AgentID, e.Actor, e.IP, string(details)); err != nil {
		return fmt.Errorf("record %s of agent %s: %w", e.Action, e.AgentID, err)
	}
	var tenant string
	err = tx.QueryRow(ctx, `SELECT coalesce(a.tenant_id, '') FROM agent_tokens a WHERE a.agent_id = $1
		ORDER BY a.revoked_at IS NULL DESC, a.created_at DESC, a.id DESC LIMIT 1`, e.AgentID).Scan(&tenant)
	if err != nil && !errNoRows(err) {
		return fmt.Errorf("record %s of agent %s: %w", e.Action, e.AgentID, err)
	}
	return s.record(ctx, tx, change{aggType: AggregateAgent, id: e.AgentID, tenant: tenant, by: Actor{ID: e.Actor, IP: e.IP}, event: ev})
}

// AgentEvents returns the agent's audit trail, newest first, at most limit
// entries (100 when limit <= 0).
func (s *Store) AgentEvents(ctx context.Context, agentID string, limit int) ([]AgentEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxAgentEvents)
	rows, err := s.db.Query(ctx, `SELECT id, at, action, agent_id, actor, ip, details::text FROM agent_events
		WHERE agent_id = $1 ORDER BY seq DESC LIMIT $2`, agentID, limit)
	if err != nil {
		return nil, fmt.Errorf("events of agent %s: %w", agentID, err)
	}
	defer rows.Close()
	var out []AgentEvent
	for rows.Next() {
		var (
			e       AgentEvent
			details string
		)
		if err := rows.Scan(&e.ID, &e.At, &e.Action, &e.AgentID, &e.Actor, &e.IP, &details); err != nil {
			return nil, fmt.Errorf("events of agent %s: %w", agentID, err)
		}
		e.At = e.At.UTC()
		if err := json.Unmarshal([]byte(details), &e.Details); err != nil {
			return nil, fmt.Errorf("event %s of agent %s: details: %w", e.ID, agentID, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
