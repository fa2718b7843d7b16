// Package quota is the quota service's domain (seed 003): tenants,
// clusters with their GPU inventory, CU and GU quotas in trees (a root at
// level 1, second-level children including a background child, deeper
// levels nested at any depth), the Ray cluster of each ⟨tenant, cluster⟩
// and the Ray WorkGroup behind each non-background second-level GU quota.
//
// It is pure: no I/O, no clock. Commands are functions of the current
// states and their inputs that return the events to record (Record) or a
// sentinel error; each state type folds its events with Apply. The
// adapters persist the events and the states they produce in one
// transaction, and publish the events.
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
//	Failed → Creating                   (applied again after a spec change)
//	Creating | Running | Failed → Deleting → Deleted
//
// Ray cluster states: Creating → Running | Failed; Failed → Creating when a
// new quota needs it.
//
// The production and unsubscription flows are driven by the application's
// process manager; this package decides each of their steps (ProvisionIntent,
// Applied, Observe, Settle…, DeleteScope), so every step can be recorded
// before or after the operator call it guards and repeated safely.
package quota
