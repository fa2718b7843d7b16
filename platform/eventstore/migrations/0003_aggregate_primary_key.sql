-- (aggregate_id, version) identifies an event and is what optimistic
-- concurrency checks; making it the primary key drops the index on id,
-- one index write less per event. Order by id (within a transaction) is
-- kept by the position index (tx_id, id), which rebuilds page through.
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events DROP CONSTRAINT events_aggregate_version_key;
ALTER TABLE events ADD CONSTRAINT events_aggregate_version_key PRIMARY KEY (aggregate_id, version);
