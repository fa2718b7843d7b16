-- The relay publishes events in (tx_id, id) order, and a reader relies on
-- an aggregate's events reaching it in version order. The two agree only
-- when the transaction appending version N+1 of an aggregate has a higher
-- id than the one that appended version N. A transaction that took its id
-- before it read the aggregate (it wrote or locked another row first) can
-- append version N+1 with the lower id, and the relay then publishes it
-- first; the chaos suite found a task group's event appended so.
--
-- Append calls events_check_order with the first event of each aggregate
-- it is about to write (the one whose predecessor is stored): one whose
-- predecessor was written by a newer transaction is refused as a
-- serialization failure (40001), so the command is decided again in a new
-- transaction, which takes a newer id
-- (docs/decisions/0121-an-event-follows-its-predecessors-transaction.md).
--
-- search_path is fixed to the schema the migration runs in: every service
-- keeps its event store in a schema of its own. Sequential scans are off
-- inside: the check is a primary-key lookup per aggregate, and a plan made
-- while the table was small must not go on reading it whole once it has
-- grown (plpgsql keeps its plans for the session).
CREATE FUNCTION events_check_order(aggregate_ids text[], versions bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    late record;
BEGIN
    SELECT e.aggregate_id, e.version, e.tx_id INTO late
    FROM unnest(aggregate_ids, versions) AS x(aggregate_id, version)
    JOIN events e ON e.aggregate_id = x.aggregate_id AND e.version = x.version - 1
    WHERE e.tx_id > pg_current_xact_id()
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'event store: version % of % was written by transaction %, newer than this one (%): appending the next version here would publish it first',
            late.version, late.aggregate_id, late.tx_id, pg_current_xact_id()
            USING ERRCODE = 'serialization_failure';
    END IF;
END
$$;
