-- Per partition, the Kafka offset from which a restarting relay reads the
-- topic to find its own records published after the checkpoint (see
-- package outbox). NULL, or a partition beyond the array: from the
-- partition's first offset.
ALTER TABLE outbox_checkpoints ADD COLUMN kafka_offsets bigint[];
