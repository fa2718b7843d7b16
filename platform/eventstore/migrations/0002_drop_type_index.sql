-- Rebuilds read every event in id order anyway; an index per aggregate type
-- only cost every append.
DROP INDEX events_type_id_idx;
