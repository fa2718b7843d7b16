-- The tenant whose GU quota's WorkGroup a ClusterQueue serves
-- (ClusterQueueDefined.tenant_id): a tenant's key sees no other tenant's
-- WorkGroup queue. Empty for every other queue.
ALTER TABLE cluster_queues ADD COLUMN tenant_id text NOT NULL DEFAULT '';
-- A WorkGroup queue named gu-<tenant>-<quota> spells its tenant out (a
-- tenant of letters and digits only); a hashed name (gu--…) does not, and
-- gets its tenant when the WorkGroup sync records the queue again. Until
-- then no tenant sees it.
UPDATE cluster_queues SET tenant_id = split_part(name, '-', 2)
    WHERE origin = 'work_group' AND name NOT LIKE 'gu--%';
