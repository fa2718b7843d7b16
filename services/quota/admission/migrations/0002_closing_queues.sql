-- Why a ClusterQueue admits nothing new (ClusterQueueDefined.closing): a
-- WorkGroup queue whose WorkGroup no longer runs keeps its admitted work
-- until it ends, then is removed. Empty for a queue that admits.
ALTER TABLE cluster_queues ADD COLUMN closing text NOT NULL DEFAULT '';
