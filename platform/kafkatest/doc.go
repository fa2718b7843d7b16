// Package kafkatest gives integration tests a real Kafka-protocol broker.
//
// New starts an embedded kfake broker (see package kafka) owned by one test,
// with its data under t.TempDir(), so a test can Stop it (clients see
// connection refused), Start it again on the same port with the same data,
// and check how producers and consumers ride out the outage.
//
// Kcat and ConsumeAll read through librdkafka's kcat, an independent client:
// a test that writes with franz-go and reads with kcat proves the records are
// on the broker in a form other Kafka clients understand, not merely that
// franz-go agrees with itself. kcat is required: tests fail, never skip,
// when it is missing.
package kafkatest
