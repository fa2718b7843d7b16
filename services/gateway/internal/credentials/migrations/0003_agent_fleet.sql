-- The agent fleet: one active token per agent id, and the agents' audit
-- trail (registered, rotated, revoked, address changed, drained).

-- An agent has at most one usable token; registering it again requires
-- revoking the old one first. Older duplicates (made before this rule by
-- code, never by an operator route) are revoked, keeping the newest.
UPDATE agent_tokens a SET revoked_at = now(), revoked_reason = 'superseded by a newer token of the same agent'
WHERE a.revoked_at IS NULL AND EXISTS (
    SELECT 1 FROM agent_tokens b
    WHERE b.agent_id = a.agent_id AND b.revoked_at IS NULL AND (b.created_at, b.id) > (a.created_at, a.id));
CREATE UNIQUE INDEX agent_tokens_active_agent_key ON agent_tokens (agent_id) WHERE revoked_at IS NULL;

-- One row per change to an agent's credential or state, with the fields of
-- the audit log (docs/api/admin.md#agents). Written in the transaction of
-- the change it records.
CREATE TABLE agent_events (
    -- The order of the trail: times may tie (or step back on another
    -- replica's clock); the order of the inserts does not.
    seq        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         text        NOT NULL UNIQUE,
    at         timestamptz NOT NULL,
    -- agent.registered, agent.token_rotated, agent.revoked,
    -- agent.address_changed, agent.drained, agent.undrained
    action     text        NOT NULL,
    agent_id   text        NOT NULL,
    -- Who: an operator key's id, or "gateway" for what it decided itself.
    actor      text        NOT NULL,
    ip         text        NOT NULL DEFAULT '',
    details    json        NOT NULL DEFAULT '{}'
);
CREATE INDEX agent_events_agent_idx ON agent_events (agent_id, seq);
