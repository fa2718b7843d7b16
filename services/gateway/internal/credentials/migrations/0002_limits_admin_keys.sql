-- Rate limits of tenants and API keys, when each key was last used, and the
-- operators' keys of the admin API.

-- Requests and tokens per minute; 0 means "not set": a tenant then has its
-- tier's default (gateway configuration), a key only its tenant's limits.
ALTER TABLE tenants
    ADD COLUMN rpm_limit  integer     NOT NULL DEFAULT 0 CHECK (rpm_limit >= 0),
    ADD COLUMN tpm_limit  integer     NOT NULL DEFAULT 0 CHECK (tpm_limit >= 0),
    ADD COLUMN updated_at timestamptz;

UPDATE tenants SET updated_at = created_at;
ALTER TABLE tenants ALTER COLUMN updated_at SET NOT NULL;

ALTER TABLE api_keys
    ADD COLUMN rpm_limit    integer NOT NULL DEFAULT 0 CHECK (rpm_limit >= 0),
    ADD COLUMN tpm_limit    integer NOT NULL DEFAULT 0 CHECK (tpm_limit >= 0),
    -- Written at most once a minute per key (see Authenticate).
    ADD COLUMN last_used_at timestamptz;

-- Operator credentials (tmo_<prefix>_<secret>): they may call the admin API
-- and nothing else. Stored like API keys: prefix in clear, SHA-256 of the
-- whole bearer string.
CREATE TABLE admin_keys (
    id           text        PRIMARY KEY,
    name         text        NOT NULL,
    prefix       text        NOT NULL,
    secret_hash  bytea       NOT NULL CHECK (length(secret_hash) = 32),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz,
    CONSTRAINT admin_keys_prefix_key UNIQUE (prefix)
);
