// Package admission is the quota service's admission core, modelled on
// Kueue: ClusterQueues with resource groups and flavors, hierarchical
// cohorts that lend and borrow quota (nominalQuota, borrowingLimit,
// lendingLimit), StrictFIFO and BestEffortFIFO queueing, and preemption
// within a ClusterQueue and across its cohort, with a minimum priority gap
// (seed 004: only when the gap is at least 3).
//
// The package is pure: no I/O and no clock. State changes only through
// facts the caller has recorded (Enqueue, Admit, Preempt, Evict, Remove,
// Reconfigure), so replaying the recorded facts into a fresh State
// rebuilds it exactly. Schedule returns decisions without changing the
// facts; the caller persists them and applies them as facts.
package admission
