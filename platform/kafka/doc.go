// Package kafka connects Taskmesh to a Kafka-protocol cluster and can run one
// in-process.
//
// Three concerns live here:
//
//   - Config turns deployment settings (seed brokers, TLS, SASL) into franz-go
//     client options, validating them up front so that a typo fails at start-up
//     with a clear message instead of as an endless reconnect loop later.
//   - EnsureTopics, Partitions and PartitionFor give the outbox relay and its
//     tests one shared view of where a keyed record lands.
//   - Embedded runs franz-go's kfake broker inside the process for
//     `taskmesh dev` and integration tests, optionally persisting to a
//     directory so that data survives restarts.
//
// Nothing in this package retries on its own beyond what franz-go does: the
// kgo client already reconnects and retries, so callers see either success or
// a context error.
package kafka
