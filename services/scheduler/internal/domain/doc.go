// Package domain is the task aggregate of the scheduler: pure decisions
// with no I/O. Each command is a function Decide(state, input, now) that
// returns the events to record (or a sentinel error), and Apply folds an
// event into the state. Adapters persist and publish what it returns; the
// clock is an input, never read here.
//
// States (seed 004 §2.3):
//
//	pending → assigned → running → completed | failed
//	failed → pending            (retry scheduled)
//	assigned|running → pending  (lease expired or agent lost)
//	running → preempted → pending
//	running → suspended → pending
//	any non-final → cancelled
//
// Every attempt (one lease) has an attempt id; start, renew, progress and
// complete are accepted only for the current attempt (fencing).
package domain
