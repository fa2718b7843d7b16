// Package postgres stores the admission layer's projection tables: the
// definitions (ClusterQueues, cohorts, LocalQueues), the workloads, and
// the task facts waiting for the admission loop. Events go to the event
// store in the same transactions.
package postgres
