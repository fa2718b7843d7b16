-- Uploads no job used expire after the upload TTL (docs/api/pipeline.md,
-- "Uploads"). used_at: when a job was first created from the upload (it
-- is then kept as long as jobs are); expired_at: when the sweeper expired
-- it (the row stays, so its key is refused with that reason); purged_at:
-- when its object was deleted (a sweeper that died in between finishes
-- the deletion on its next pass).
ALTER TABLE uploads
    ADD COLUMN used_at    timestamptz,
    ADD COLUMN expired_at timestamptz,
    ADD COLUMN purged_at  timestamptz;
CREATE INDEX uploads_unused_idx ON uploads (created_at) WHERE used_at IS NULL AND expired_at IS NULL;
CREATE INDEX uploads_unpurged_idx ON uploads (expired_at) WHERE expired_at IS NOT NULL AND purged_at IS NULL;
