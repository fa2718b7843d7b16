-- The Kafka offsets each projection has applied, written in the same
-- transaction as the projection's rows.
CREATE TABLE projection_offsets (
    projection  text        NOT NULL,
    topic       text        NOT NULL,
    partition   int         NOT NULL,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, topic, partition)
);
