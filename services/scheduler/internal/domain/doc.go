// Package domain is the task aggregate of the scheduler: pure decisions
// with no I/O. Each command is a function Decide(state, input, now) that
// returns the events to record (or a sentinel error), and Apply folds an
// event into the state. Adapters persist and publish what it returns; the
// clock is an input, never read here.
//
// States (Status; Statuses lists them, and every service uses this one set
// through package lifecycle):
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
//
// # One lifecycle, one fold
//
// Apply is the only fold of task events. The inline projection (the tasks
// table claims read), its rebuild from the event store, the task_views read
// model and the gateway's live streams all move a task with it, so a task
// looks the same wherever it is read. Every other consumer of the task
// topic converts each event explicitly — a case that does something or a
// case that says the event means nothing to it — and reports an event it
// has no case for, so a forgotten case fails the lifecycle-coverage tests
// (TestLifecycleCoverage in each consumer's package), which range over the
// TaskEvent oneof by reflection.
//
// # Adding an event
//
//  1. Proto: the message in proto/taskmesh/task/v1/task_events.proto and a
//     new case in TaskEvent's event oneof (a new field number; numbers are
//     never reused), then make generate.
//  2. Domain: the event type in events.go (past tense, EventName), the
//     command that records it (commands.go, with its sentinel errors), and
//     its case in Apply. Test the command and the fold in domain_test.go.
//  3. Codec (internal/adapters/codec): both directions, Envelope and
//     Record, and an example in TestEveryEventRoundTrips.
//  4. Read models (internal/adapters/views): task_views follows from Apply.
//     The consumers service (services/consumers) needs a row in the audit
//     log's action table and a case in usage metering's and webhook
//     notification's converts.
//  5. Live streams follow from Apply through package lifecycle; decide in
//     the gateway's views (services/gateway/internal/live, TaskView and
//     VideoView) whether the change is worth a frame.
//  6. Admission: a case in the quota service's Convert
//     (services/quota/internal/admission/adapters/tasks) saying what the
//     event means for the task's workload, or that it means nothing.
//  7. Docs: the event, its fields and its consumers in docs/events.md.
//
// Then go test -run TestLifecycleCoverage over the scheduler, gateway and
// quota modules names any consumer still missing a case.
package domain
