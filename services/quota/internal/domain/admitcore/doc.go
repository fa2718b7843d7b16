// Package admitcore is the quota service's admission core, modelled on
// Kueue: ClusterQueues with resource groups and flavors, hierarchical
// cohorts that lend and borrow quota (nominalQuota, borrowingLimit,
// lendingLimit), StrictFIFO and BestEffortFIFO queueing, and preemption
// within a ClusterQueue and across its cohort, with a minimum priority gap
// (the embedded defaults: only when the gap is at least 3; see
// docs/decisions/0011-kueue-style-admission.md).
//
// The package is pure: no I/O and no clock. State changes only through
// facts the caller has recorded (Enqueue, Admit, Preempt, Evict, Remove,
// Reconfigure), so replaying the recorded facts into a fresh State
// rebuilds it exactly. Schedule returns decisions without changing the
// facts; the caller persists them and applies them as facts: an Admit
// decision with Admit, a Preempt decision with Preempt at once and with
// Evict once the victim has stopped (its quota stays charged until then,
// and its preemptor asks for no other victims meanwhile).
//
// Schedule keeps memos of workloads that neither fit nor could preempt so
// that a cycle does not re-evaluate thousands of pending workloads; they
// are checked against the quota available at the moment, never against a
// clock, and never change a decision (the property test compares with a
// state rebuilt from the facts).
package admitcore
