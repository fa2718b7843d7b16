// Package platform is the root of Taskmesh's infrastructure packages (pg,
// eventstore, outbox, kafka, projection, leader, otel, …). It holds no code
// itself.
package platform
