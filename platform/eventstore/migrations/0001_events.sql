-- The event store: the source of truth of a service. It is also the outbox:
-- the relay publishes rows in (tx_id, id) order, see package outbox.
CREATE TABLE events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The writing transaction: lets the relay publish only rows whose
    -- transaction is finished, so a late commit is never skipped.
    tx_id          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    version        bigint      NOT NULL CHECK (version > 0),
    event_type     text        NOT NULL,
    event_id       uuid        NOT NULL,
    tenant_id      text        NOT NULL DEFAULT '',
    occurred_at    timestamptz NOT NULL,
    payload        bytea       NOT NULL,
    headers        jsonb,
    CONSTRAINT events_aggregate_version_key UNIQUE (aggregate_id, version)
);

CREATE INDEX events_position_idx ON events (tx_id, id);
CREATE INDEX events_type_id_idx ON events (aggregate_type, id);

-- Where each relay has published up to (see package outbox).
CREATE TABLE outbox_checkpoints (
    relay      text        PRIMARY KEY,
    tx_id      xid8        NOT NULL,
    event_id   bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
