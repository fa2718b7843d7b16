// Package quota connects the scheduler to the quota service: a client that
// asks which ClusterQueue admits a new task (app.Admission), and a Kafka
// consumer that applies the service's admission and preemption decisions
// (WorkloadAdmitted, WorkloadPreemptionRequested on the quota topic) to
// tasks.
//
// Decisions are applied at least once: the consumer stores its offsets
// after the tasks changed, and each decision names the task's stay in the
// queue (task_version), so a redelivered or overtaken decision changes
// nothing (domain.Task.Admit and Evict).
package quota
