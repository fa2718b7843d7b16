// Package capacity is the quota service's domain: tenants,
// clusters with their GPU inventory, CU and GU quotas in trees (a root at
// level 1, second-level children including a background child, deeper
// levels nested at any depth), the Ray cluster of each ⟨tenant, cluster⟩
// and the Ray WorkGroup behind each non-background second-level GU quota.
//
// It is pure: no I/O, no clock. Decisions are functions of the current
// states and their inputs (the time among them) that return the events to
// record or a sentinel error (errors.go); each state type folds its events
// with Apply. The store assigns versions, persists the events and the
// states they produce in one transaction, and the outbox publishes them.
//
// Quota states:
//
//	Provisioning → Active | Failed      (GU roots and WorkGroup quotas; others start Active)
//	Failed → Active                     (the WorkGroup recovered after an update)
//	any open state → Unsubscribing → Deleted
//
// WorkGroup states:
//
//	Creating → Running | Failed
//	Running | Failed → Creating         (applied again after a spec change)
//	Creating | Running | Failed → Deleting → Deleted
//
// Ray cluster states: Creating → Running | Failed; Failed → Creating when a
// new quota needs it.
//
// The production and unsubscription flows are driven by the application's
// process manager; this package decides each of their steps (Produce,
// ObserveRay, ObserveWorkGroup, FailWorkGroup, SettleProduction,
// Unsubscribe, FinishUnsubscription), so every step is recorded before or
// after the operator call it guards and can be repeated safely: a decision
// on a state that already moved on returns no events.
package capacity
