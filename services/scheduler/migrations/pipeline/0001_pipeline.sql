-- The pipeline's inline projection: one row per job, the fold of its
-- events (domain.Apply), written in the same transaction as them.
CREATE TABLE jobs (
    job_id     text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    status     text        NOT NULL,
    version    bigint      NOT NULL,
    doc        jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
-- The reconciliation sweep pages through the jobs still running.
CREATE INDEX jobs_active_idx ON jobs (job_id) WHERE status NOT IN ('COMPLETED', 'FAILED');

-- Uploaded input files and whose they are.
CREATE TABLE uploads (
    key        text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    kind       text        NOT NULL,
    name       text        NOT NULL,
    size       bigint      NOT NULL,
    sha256     text        NOT NULL,
    created_at timestamptz NOT NULL
);
