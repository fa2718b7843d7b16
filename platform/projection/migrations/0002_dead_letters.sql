-- Records a projection or consumer could not apply after bounded retries,
-- parked so that the records behind them are applied (docs/architecture.md,
-- "Dead letters"). Written in the transaction that moves the consumer's
-- offset past the record; removed when a retry applies it or an operator
-- drops it.
CREATE TABLE projection_dead_letters (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    projection         text        NOT NULL,
    topic              text        NOT NULL,
    partition          int         NOT NULL,
    record_offset      bigint      NOT NULL,
    event_id           text        NOT NULL DEFAULT '',
    record_key         bytea,
    header_keys        text[]      NOT NULL DEFAULT '{}',
    header_values      bytea[]     NOT NULL DEFAULT '{}',
    payload            bytea       NOT NULL,
    error              text        NOT NULL,
    attempts           int         NOT NULL,
    parked_at          timestamptz NOT NULL DEFAULT now(),
    -- Set by an operator's retry; the consumer that owns the projection
    -- applies the record again and clears it.
    retry_requested_at timestamptz,
    last_retry_at      timestamptz,
    UNIQUE (projection, topic, partition, record_offset)
);
CREATE INDEX projection_dead_letters_retry_idx ON projection_dead_letters (projection)
    WHERE retry_requested_at IS NOT NULL;
