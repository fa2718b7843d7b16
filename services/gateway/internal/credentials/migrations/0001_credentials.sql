-- Credentials of the public edge: tenants, their API keys, and agent tokens.
-- Secrets are never stored: only the SHA-256 of the whole bearer string, found
-- through a random, non-secret prefix that is part of the string.

CREATE TABLE tenants (
    id         text        PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    name       text        NOT NULL CHECK (name <> ''),
    tier       text        NOT NULL CHECK (tier IN ('premium', 'standard')),
    created_at timestamptz NOT NULL
);

CREATE TABLE api_keys (
    id          text        PRIMARY KEY,
    tenant_id   text        NOT NULL REFERENCES tenants (id),
    name        text        NOT NULL,
    prefix      text        NOT NULL,
    secret_hash bytea       NOT NULL CHECK (length(secret_hash) = 32),
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz,
    revoked_at  timestamptz,
    CONSTRAINT api_keys_prefix_key UNIQUE (prefix)
);

CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id, created_at);

CREATE TABLE agent_tokens (
    id             text        PRIMARY KEY,
    agent_id       text        NOT NULL CHECK (agent_id <> ''),
    -- NULL: an agent of the shared pool, serving every tenant.
    tenant_id      text        REFERENCES tenants (id),
    prefix         text        NOT NULL,
    secret_hash    bytea       NOT NULL CHECK (length(secret_hash) = 32),
    -- Canonical CIDRs the token may be used from; empty binds the token to
    -- bound_ip, the first address it is used from.
    allowed_cidrs  text[]      NOT NULL DEFAULT '{}',
    bound_ip       text,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz,
    rotated_at     timestamptz,
    revoked_at     timestamptz,
    revoked_reason text        NOT NULL DEFAULT '',
    CONSTRAINT agent_tokens_prefix_key UNIQUE (prefix)
);

CREATE INDEX agent_tokens_agent_idx ON agent_tokens (agent_id);
