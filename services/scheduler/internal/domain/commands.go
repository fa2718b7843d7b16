package domain

import (
	"fmt"
	"time"
)

// Submit records a new pending task; with a clusterQueue it waits there
// for admission before any agent may claim it.
func Submit(now time.Time, id, tenantID, createdBy, requestID, fanoutID string, spec Spec, clusterQueue string) []Record {
	return []Record{{At: now, Actor: createdBy, Event: Submitted{ID: id, TenantID: tenantID, CreatedBy: createdBy,
		RequestID: requestID, FanoutID: fanoutID, Spec: spec, ClusterQueue: clusterQueue,
		HeldForDependencies: holdsForDependencies(spec, clusterQueue)}}}
}

// holdsForDependencies is the rule for a task written with spec and
// clusterQueue: a task with dependencies enters its queue only once they
// have completed (DependenciesMet). Admitted earlier it would hold quota
// it cannot use, and in a queue too small for both it would keep its own
// dependency from ever being admitted. See docs/api/quota.md, "Which work
// waits, and where".
func holdsForDependencies(spec Spec, clusterQueue string) bool {
	return clusterQueue != "" && len(spec.DependsOn) > 0
}

func recordOf(now time.Time, actor string, e Event) []Record {
	return []Record{{At: now, Actor: actor, Event: e}}
}

// AgentActor is the actor of a change an agent caused: "agent:<id>", the
// form the audit log's user_id documents (docs/api/audit.md), so an
// agent is never mistaken for an API key of the same id. A change with
// no agent (a backend reporting for the server) has no agent actor.
func AgentActor(agentID string) string {
	if agentID == "" {
		return ""
	}
	return "agent:" + agentID
}

// CheckAddedDependencies checks the task ids an update adds to t's
// depends_on; found are the tasks of t's tenant among them. Each must
// exist and be older than t: a task is created depending only on tasks
// that exist, so every dependency is older than its dependent, and keeping
// that order on update means dependencies never form a cycle, whose tasks
// would all wait for ever (docs/api/tasks.md, UpdateTask).
func (t Task) CheckAddedDependencies(added []string, found []Task) error {
	byID := make(map[string]Task, len(found))
	for _, d := range found {
		byID[d.ID] = d
	}
	for _, id := range added {
		d, ok := byID[id]
		switch {
		case !ok:
			return invalid("depends_on", "no such task %q", id)
		case !d.CreatedAt.Before(t.CreatedAt) && !(d.CreatedAt.Equal(t.CreatedAt) && d.ID < t.ID):
			return invalid("depends_on", "task %q is not older than this task: a task depends only on tasks created before it", id)
		}
	}
	return nil
}

// Update replaces a pending task's spec; a task with a clusterQueue waits
// for admission again (its requests or priority may have changed).
func (t Task) Update(now time.Time, actor string, spec Spec, clusterQueue string) ([]Record, error) {
	if t.Status != StatusPending {
		return nil, immutable(t, "update")
	}
	return recordOf(now, actor, Updated{Spec: spec, ClusterQueue: clusterQueue,
		HeldForDependencies: holdsForDependencies(spec, clusterQueue)}), nil
}

// Delete removes a task. A leased one (assigned or running) is cancelled
// in the same decision, as the video API's DELETE cancels a running
// generation: its attempt is told to stop at its agent's next heartbeat
// (MustStop: deleted), its lease and admission end, its dependents are
// cancelled, and the attempt's late calls meet the tombstone. A task
// already removed is not found (the store's reads), so a repeated delete
// is 30004.
func (t Task) Delete(now time.Time, actor string) ([]Record, error) {
	var out []Record
	if t.Status.Leased() {
		out = recordOf(now, actor, Canceled{Reason: "deleted", AttemptID: t.AttemptID})
	}
	return append(out, Record{At: now, Actor: actor, Event: Deleted{}}), nil
}

// Cancel stops a task that is not final; an active attempt is told to stop.
func (t Task) Cancel(now time.Time, actor, reason string) ([]Record, error) {
	if t.Status.Final() {
		return nil, immutable(t, "cancel")
	}
	// The event names the attempt it stops, so the agent's heartbeat and the
	// audit trail know which process ends.
	return recordOf(now, actor, Canceled{Reason: reason, AttemptID: t.AttemptID}), nil
}

// Expire removes a task whose retention ended (the video API keeps its
// tasks 24 hours). A task that is not final is cancelled first, so its
// attempt is told to stop and nothing counts it as live any more.
func (t Task) Expire(now time.Time, actor string) ([]Record, error) {
	if t.Deleted {
		return nil, fmt.Errorf("%w: the task is already removed", ErrImmutable)
	}
	var out []Record
	if !t.Status.Final() {
		out = recordOf(now, actor, Canceled{Reason: "expired", AttemptID: t.AttemptID})
	}
	return append(out, Record{At: now, Actor: actor, Event: Expired{}}), nil
}

// Retry puts a failed or cancelled task back to pending at once; it does
// not count against max_retries.
func (t Task) Retry(now time.Time, actor string) ([]Record, error) {
	if t.Status != StatusFailed && t.Status != StatusCancelled {
		return nil, immutable(t, "retry")
	}
	// The count stays: a manual retry is the user's decision, not a failure
	// that max_retries should absorb.
	return recordOf(now, actor, RetryScheduled{RetryCount: t.RetryCount, RetryAt: now, Manual: true}), nil
}

// Lease hands the task to an agent under a new attempt.
func (t Task) Lease(now time.Time, attemptID, agentID, machineID, claimRequestID string) ([]Record, error) {
	// Claimable checks status, deletion, retry time and admission together,
	// so a lease never takes a task the quota has not admitted or whose
	// retry delay has not passed.
	if !t.Claimable(now) {
		return nil, immutable(t, "lease")
	}
	return recordOf(now, AgentActor(agentID), Leased{AttemptID: attemptID, AgentID: agentID, MachineID: machineID,
		ClaimRequestID: claimRequestID, LeaseExpiresAt: now.Add(time.Duration(t.Spec.LeaseTTL) * time.Second)}), nil
}

// checkAttempt is the fencing rule shared by the agent calls: another
// attempt is 30001 before anything else is looked at.
func (t Task) checkAttempt(agentID, attemptID string) error {
	// The agent is compared too when it is known: an attempt id that reached
	// another agent is still refused. Fencing comes before every other
	// check, so a stale attempt always learns that it lost the task rather
	// than a state it must not act on.
	if attemptID == "" || attemptID != t.AttemptID || (agentID != "" && agentID != t.AgentID) {
		return ErrAttemptMismatch
	}
	return nil
}

// checkLeaseOf is the rule of renew and progress (docs/api/tasks.md,
// "Leases, attempts and heartbeats"): an attempt whose lease expired gets 30003 whatever
// happened to the task since (the sweeper took it back, another attempt
// holds it, it failed for want of retries), so an agent learns why it lost
// the task rather than being told it never had it. Every other attempt
// that is not the current one gets 30001.
func (t Task) checkLeaseOf(now time.Time, agentID, attemptID string) error {
	if attemptID != "" && attemptID != t.AttemptID {
		if p, ok := t.pastAttempt(attemptID); ok && p.LeaseExpired && (agentID == "" || agentID == p.AgentID) {
			return leaseEnded(now, p)
		}
	}
	return t.checkCurrentLease(now, agentID, attemptID)
}

// checkCurrentLease is checkLeaseOf for the current attempt: any other
// attempt is 30001, and the current attempt whose lease ended is 30003.
func (t Task) checkCurrentLease(now time.Time, agentID, attemptID string) error {
	if err := t.checkAttempt(agentID, attemptID); err != nil {
		return err
	}
	if p, ok := t.pastAttempt(attemptID); ok && p.LeaseExpired {
		// The current attempt's lease expired with no retry left: the task
		// failed, but for this attempt the lease is what ended.
		return leaseEnded(now, p)
	}
	return nil
}

// leaseEnded is the 30003 of an attempt whose lease ended. A lease taken
// back before it would have run out was released because its agent was
// lost: saying it expired at a time still to come would send its agent
// looking at its clock.
func leaseEnded(now time.Time, p PastAttempt) error {
	if p.LeaseExpiresAt.After(now) {
		return fmt.Errorf("%w: the task was taken back from this attempt before its lease ran out, its agent being lost (silent past the lost-agent window)", ErrLeaseExpired)
	}
	return fmt.Errorf("%w at %s", ErrLeaseExpired, p.LeaseExpiresAt.UTC().Format(time.RFC3339))
}

// finishedBy reports whether agentID may be the agent of the attempt that
// last reported an outcome (FinishedAttemptID): its agent as the task
// still names it, or as remembered once the task moved on (a retry, a new
// lease by another agent). An agent no longer known, the attempt being
// older than the remembered ones, is not held against the repeat.
func (t Task) finishedBy(agentID string) bool {
	if t.AttemptID == t.FinishedAttemptID && t.AgentID != "" {
		return agentID == t.AgentID
	}
	if p, ok := t.pastAttempt(t.FinishedAttemptID); ok && p.AgentID != "" {
		return agentID == p.AgentID
	}
	return true
}

// OutcomeOf is how attemptID ended, as CompleteTask answers its report
// the first time and on every repeat (docs/api/tasks.md#idempotency): the
// outcome it reported, whatever the task did since (a retry, another
// lease); an attempt preempted and requeued left the task pending.
// Another attempt answers the task as it is.
func (t Task) OutcomeOf(attemptID string) (Status, time.Time) {
	switch {
	case attemptID != "" && attemptID == t.FinishedAttemptID:
		return t.FinishedStatus, t.FinishedAt
	case attemptID != t.AttemptID:
		if p, ok := t.pastAttempt(attemptID); ok && p.Preempted {
			return StatusPending, time.Time{}
		}
	}
	return t.Status, t.EndedAt
}

// pastAttempt finds an earlier attempt of the task.
func (t Task) pastAttempt(attemptID string) (PastAttempt, bool) {
	for _, p := range t.PastAttempts {
		if p.ID == attemptID {
			return p, true
		}
	}
	return PastAttempt{}, false
}

// checkLive refuses a final or preempted task (30002) and an expired lease
// (30003).
func (t Task) checkLive(now time.Time, what string) error {
	if !t.Status.Leased() {
		return immutable(t, what)
	}
	// An expired lease is refused before the sweeper takes the task back: it
	// may be leased again at any moment, and the agent must stop rather than
	// extend it.
	if !t.LeaseExpiresAt.IsZero() && now.After(t.LeaseExpiresAt) {
		return fmt.Errorf("%w at %s", ErrLeaseExpired, t.LeaseExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// Start marks the attempt running. Repeating it for a running attempt
// records nothing and succeeds.
func (t Task) Start(now time.Time, agentID, attemptID string) ([]Record, error) {
	if err := t.checkAttempt(agentID, attemptID); err != nil {
		return nil, err
	}
	if err := t.checkLive(now, "start"); err != nil {
		return nil, err
	}
	// A start repeated after a lost answer succeeds without a second event.
	if t.Status == StatusRunning {
		return nil, nil
	}
	return recordOf(now, AgentActor(agentID), Started{AttemptID: attemptID, MachineID: t.AssignedMachine, LeaseExpiresAt: t.renewedUntil(now, 0)}), nil
}

func (t Task) renewedUntil(now time.Time, extendSec int) time.Time {
	if extendSec <= 0 {
		extendSec = t.Spec.LeaseTTL
	}
	return now.Add(time.Duration(extendSec) * time.Second)
}

// Renew extends the attempt's lease by extendSec (default the task's
// lease_ttl_sec). An attempt whose lease expired is 30003 even once the
// task has moved on (see checkLeaseOf).
func (t Task) Renew(now time.Time, agentID, attemptID string, extendSec int) ([]Record, error) {
	if err := t.checkLeaseOf(now, agentID, attemptID); err != nil {
		return nil, err
	}
	if err := t.checkLive(now, "renew the lease of"); err != nil {
		return nil, err
	}
	return recordOf(now, AgentActor(agentID), LeaseRenewed{AttemptID: attemptID, LeaseExpiresAt: t.renewedUntil(now, extendSec)}), nil
}

// ReportProgress records progress of the current attempt.
func (t Task) ReportProgress(now time.Time, agentID, attemptID string, progress int, message string) ([]Record, error) {
	// Progress is a heartbeat as a renewal is, and is fenced like one: an
	// attempt whose lease expired learns it (30003), whatever happened to
	// the task since (decision 0100, revised).
	if err := t.checkLeaseOf(now, agentID, attemptID); err != nil {
		return nil, err
	}
	if err := t.checkLive(now, "report progress on"); err != nil {
		return nil, err
	}
	// After fencing and liveness: a stale attempt learns that it lost the
	// task before it learns that its progress was out of range.
	if progress < 0 || progress > 100 {
		return nil, invalid("progress", "must be 0 to 100")
	}
	return recordOf(now, AgentActor(agentID), Progressed{AttemptID: attemptID, Progress: progress, Message: message}), nil
}

// Outcome is what an agent reports at the end of an attempt.
type Outcome struct {
	ExitCode int
	Error    string // set when the process could not report (timeout, spawn error, killed)
	Reason   string // timeout, spawn_error, killed, …; "" derives exit_code or error
	Result   *Result
	EndedAt  time.Time
	// PreemptedBy names what outside Taskmesh took the attempt away (the
	// system the agent runs work through, e.g. "slurm"): the attempt ends
	// preempted, not failed, and the task is requeued without using a
	// retry. Error says why; the exit code and result are ignored.
	PreemptedBy string
	// Cancelled: someone on the agent's machine cancelled the attempt
	// (the agent-local API). The task ends cancelled, as CancelTask ends
	// it: no retry, its dependents cancelled. Error says why; the exit
	// code and result are ignored.
	Cancelled bool
}

// Complete records the attempt's outcome: completed on exit code 0 without
// error, otherwise failed, followed by a retry while retries remain; or,
// with PreemptedBy, preempted and requeued at once. Repeating it for an
// attempt that already reported succeeds and records nothing (Repeat
// reports it). A lease that ran out is not held against an attempt the
// sweeper has not yet expired: its result is still the truth.
func (t Task) Complete(now time.Time, agentID, attemptID string, o Outcome) (records []Record, repeat bool, err error) {
	// Before fencing: the attempt's first CompleteTask may have been
	// recorded and its answer lost. Its retry must succeed even if the task
	// has moved on to another attempt since.
	if attemptID != "" && attemptID == t.FinishedAttemptID && (agentID == "" || t.finishedBy(agentID)) {
		return nil, true, nil
	}
	// A preempted attempt is requeued in the same command, so it is a past
	// attempt by the time a repeat of its report arrives.
	if p, ok := t.pastAttempt(attemptID); ok && o.PreemptedBy != "" && p.Preempted && (agentID == "" || agentID == p.AgentID) {
		return nil, true, nil
	}
	if o.Cancelled && o.PreemptedBy != "" {
		return nil, false, invalid("cancelled", "an attempt ends cancelled or preempted, not both")
	}
	// A cancelled attempt keeps its id on the task (Canceled), so its
	// repeated report is recognised here.
	if o.Cancelled && t.Status == StatusCancelled && attemptID != "" && attemptID == t.AttemptID &&
		(agentID == "" || agentID == t.AgentID) {
		return nil, true, nil
	}
	if err := t.checkAttempt(agentID, attemptID); err != nil {
		return nil, false, err
	}
	if !t.Status.Leased() {
		return nil, false, immutable(t, "complete")
	}
	// The agent's clock is not trusted past the server's: an end in the
	// future would have the task end after it was read.
	if o.EndedAt.IsZero() || o.EndedAt.After(now) {
		o.EndedAt = now
	}
	// Nor before the attempt's recorded lease and start: an agent starts the
	// process alongside its StartTask (docs/executor.md), so a short task
	// can end by the agent's clock before the server recorded its start,
	// and a task must never read as ending before it started
	// (docs/api/tasks.md#agent-protocol).
	for _, floor := range []time.Time{t.AssignedAt, t.StartedAt} {
		if o.EndedAt.Before(floor) {
			o.EndedAt = floor
		}
	}
	if o.PreemptedBy != "" {
		return t.preemptedOutside(now, agentID, o), false, nil
	}
	if o.Cancelled {
		reason := o.Error
		if reason == "" {
			reason = "cancelled on agent " + agentID
		}
		return recordOf(now, AgentActor(agentID), Canceled{Reason: reason, AttemptID: attemptID}), false, nil
	}
	if o.ExitCode == 0 && o.Error == "" {
		return recordOf(now, AgentActor(agentID), Succeeded{AttemptID: attemptID, MachineID: t.AssignedMachine, ExitCode: 0, Result: o.Result, EndedAt: o.EndedAt}), false, nil
	}
	reason := o.Reason
	if reason == "" {
		reason = "exit_code"
		if o.Error != "" {
			reason = "error"
		}
	}
	code := o.ExitCode
	msg := o.Error
	if msg == "" {
		msg = fmt.Sprintf("exit code %d", code)
	}
	return t.fail(now, AgentActor(agentID), Failed{AttemptID: attemptID, ExitCode: &code, Error: msg, Reason: reason,
		Result: o.Result, EndedAt: o.EndedAt}), false, nil
}

// preemptedOutside ends an attempt that something outside Taskmesh took
// away (Outcome.PreemptedBy) as Taskmesh's own preemption ends: preempted,
// then requeued. Both are recorded in one command because the agent has
// already stopped the attempt, which is what the requeue of a preemption
// Taskmesh decided waits for (the heartbeat). The task did not fail, so no
// retry is used and retry_delay does not apply; its admission starts over
// like any requeue's.
func (t Task) preemptedOutside(now time.Time, agentID string, o Outcome) []Record {
	reason := o.Error
	if reason == "" {
		reason = "preempted by " + o.PreemptedBy
	}
	return []Record{
		{At: now, Actor: AgentActor(agentID), Event: Preempted{AttemptID: t.AttemptID, MachineID: t.AssignedMachine, By: o.PreemptedBy, Reason: reason}},
		{At: now, Actor: AgentActor(agentID), Event: Requeued{From: string(StatusPreempted), Reason: "preempted by " + o.PreemptedBy}},
	}
}

// fail records a failed attempt and, while retries remain, its retry after
// retry_delay.
func (t Task) fail(now time.Time, actor string, f Failed) []Record {
	f.MachineID = t.AssignedMachine
	f.RetryFollows = t.RetryCount < t.Spec.MaxRetries
	out := recordOf(now, actor, f)
	// The retry is recorded with the failure, in one command: no crash can
	// leave a failed task that should have been retried.
	if f.RetryFollows {
		out = append(out, Record{At: now, Actor: actor, Event: RetryScheduled{RetryCount: t.RetryCount + 1,
			RetryAt: now.Add(time.Duration(t.Spec.RetryDelay) * time.Second)}})
	}
	return out
}

// Lease-loss reasons.
const (
	ReasonLeaseExpired = "lease_expired"
	ReasonAgentLost    = "agent_lost"
	ReasonTimeout      = "timeout"
)

// ExpireLease takes the task back from an attempt whose lease ran out or
// whose agent stopped heartbeating: pending again at once (a crash should
// not wait for retry_delay), or failed when its retries are used up. A
// task its agent never started (assigned, whether the lease ran out or the
// agent was lost) goes back without using a retry: nothing of it ran, so
// nothing failed (docs/api/tasks.md, "Leases, attempts and heartbeats").
func (t Task) ExpireLease(now time.Time, reason string) ([]Record, error) {
	if !t.Status.Leased() {
		return nil, immutable(t, "expire the lease of")
	}
	// A lost lease uses up a retry like a failed attempt, so a task that
	// keeps killing its agents stops after max_retries instead of cycling
	// for ever. A task its agent never started cannot have killed it.
	count := t.RetryCount
	exhausted := false
	if t.Status != StatusAssigned {
		exhausted = t.RetryCount >= t.Spec.MaxRetries
		if !exhausted {
			count++
		}
	}
	return recordOf(now, "scheduler", LeaseExpired{AttemptID: t.AttemptID, AgentID: t.AgentID, Reason: reason,
		RetryCount: count, Failed: exhausted}), nil
}

// TimedOut reports whether a running attempt outlived its timeout plus the
// grace period and slack an agent needs to report it itself.
func (t Task) TimedOut(now time.Time, slack time.Duration) bool {
	if t.Status != StatusRunning || t.StartedAt.IsZero() {
		return false
	}
	// The agent enforces the timeout and reports it itself; the scheduler
	// steps in only after the grace period and the slack, for an agent that
	// could not.
	limit := time.Duration(t.Spec.Timeout+t.Spec.GracePeriod)*time.Second + slack
	return now.Sub(t.StartedAt) > limit
}

// TimeOut fails an attempt the agent did not report in time.
func (t Task) TimeOut(now time.Time) ([]Record, error) {
	if t.Status != StatusRunning {
		return nil, immutable(t, "time out")
	}
	return t.fail(now, "scheduler", Failed{AttemptID: t.AttemptID, Error: fmt.Sprintf("timeout after %ds", t.Spec.Timeout),
		Reason: ReasonTimeout, EndedAt: now}), nil
}

// Preempt stops the attempt to make room for the task by; the task waits
// in preempted until Requeue.
func (t Task) Preempt(now time.Time, by, reason string) ([]Record, error) {
	if !t.Status.Leased() {
		return nil, immutable(t, "preempt")
	}
	return recordOf(now, "scheduler", Preempted{AttemptID: t.AttemptID, MachineID: t.AssignedMachine, By: by, Reason: reason}), nil
}

// Suspend pauses a task on purpose (docs/api/tasks.md#suspend-and-resume):
// a pending or preempted one is held out of the queue; a leased one keeps
// its attempt id until it is resumed, so its agent learns at its next
// heartbeat that it must stop (MustStop), and a cooperative one saves its
// checkpoint first. The task's quota is freed either way.
func (t Task) Suspend(now time.Time, actor, reason string) ([]Record, error) {
	switch t.Status {
	case StatusPending, StatusAssigned, StatusRunning, StatusPreempted:
	default:
		return nil, immutable(t, "suspend")
	}
	return recordOf(now, actor, Suspended{AttemptID: t.AttemptID, Reason: reason}), nil
}

// Resume puts a suspended task back in the queue. Its next run gets the
// last checkpoint back.
func (t Task) Resume(now time.Time, actor string) ([]Record, error) {
	if t.Status != StatusSuspended {
		return nil, immutable(t, "resume")
	}
	return recordOf(now, actor, Requeued{From: string(StatusSuspended), Reason: "resumed"}), nil
}

// RecordCheckpoint records the checkpoint an attempt saved. It is accepted
// from the current attempt while it is leased, and after a preemption or
// suspension until the task is requeued: the process writes its
// checkpoint after it was told to stop.
func (t Task) RecordCheckpoint(now time.Time, agentID, attemptID, key string, size int64, sha string) ([]Record, error) {
	if err := t.checkAttempt(agentID, attemptID); err != nil {
		return nil, err
	}
	if !t.Spec.Checkpoint {
		return nil, fmt.Errorf("%w: the task did not enable checkpoints", ErrImmutable)
	}
	switch t.Status {
	case StatusAssigned, StatusRunning, StatusPreempted, StatusSuspended:
	default:
		return nil, immutable(t, "checkpoint")
	}
	if key == "" {
		return nil, invalid("object_key", "is required")
	}
	return recordOf(now, AgentActor(agentID), Checkpointed{AttemptID: attemptID, Key: key, SizeBytes: size, SHA256: sha}), nil
}

// AwaitsCheckpoint reports whether a preempted cooperative task should stay
// preempted a little longer: its attempt has not recorded its checkpoint
// yet and may still, within the grace period plus slack after the
// preemption. Requeued earlier, the next run would start without it.
func (t Task) AwaitsCheckpoint(now time.Time, slack time.Duration) bool {
	if !t.Spec.Checkpoint || t.Status != StatusPreempted || t.Preemption == nil || t.AttemptID == "" {
		return false
	}
	if t.Checkpoint != nil && t.Checkpoint.AttemptID == t.AttemptID {
		return false
	}
	return now.Before(t.Preemption.PreemptedAt.Add(time.Duration(t.Spec.GracePeriod)*time.Second + slack))
}

// Requeue returns a preempted or suspended task to pending.
func (t Task) Requeue(now time.Time, actor, reason string) ([]Record, error) {
	if t.Status != StatusPreempted && t.Status != StatusSuspended {
		return nil, immutable(t, "requeue")
	}
	return recordOf(now, actor, Requeued{From: string(t.Status), Reason: reason}), nil
}

// MustStop reports whether an agent running attemptID must stop it, and why.
func (t Task) MustStop(attemptID string) (bool, string) {
	switch {
	case t.Deleted:
		return true, "deleted"
	case attemptID != t.AttemptID:
		return true, "lease_lost"
	case t.Status == StatusCancelled:
		return true, "cancelled"
	case t.Status == StatusPreempted:
		return true, "preempted"
	case t.Status == StatusSuspended:
		return true, "suspended"
	case !t.Status.Leased():
		return true, "lease_lost"
	}
	return false, ""
}

// ReleaseForAdmission puts a task held for its dependencies in its
// ClusterQueue. The caller has seen them all completed (the task store's
// awaiting_dependencies); a task not held, or no longer pending, records
// nothing, so releasing twice is harmless.
func (t Task) ReleaseForAdmission(now time.Time) []Record {
	if !t.HeldForDependencies || t.Status != StatusPending || t.Deleted {
		return nil
	}
	return recordOf(now, "scheduler", DependenciesMet{Spec: t.Spec, ClusterQueue: t.ClusterQueue})
}

// Admit records the quota service's admission of the task's stay in its
// ClusterQueue that began at version epoch. A decision about another queue
// or an earlier stay, or for a task no longer waiting or held out of its
// queue for its dependencies, records nothing:
// decisions arrive asynchronously and may have been overtaken.
func (t Task) Admit(now time.Time, epoch int64, clusterQueue string, flavors map[string]string) []Record {
	if !t.AwaitingAdmission() || t.HeldForDependencies || t.AdmissionEpoch != epoch || t.ClusterQueue != clusterQueue {
		return nil
	}
	return recordOf(now, "quota", Admitted{Queue: t.Spec.Queue, ClusterQueue: clusterQueue, Flavors: flavors})
}

// Evict takes the admission of the stay that began at epoch back to make
// room for the task by: a leased attempt is preempted (its agent stops it;
// the task waits in preempted until it has), an admitted task no agent has
// taken yet goes straight back to its queue. Anything else (another stay,
// already preempted, final) records nothing.
func (t Task) Evict(now time.Time, epoch int64, by, reason string) []Record {
	if t.ClusterQueue == "" || !t.Admitted || t.AdmissionEpoch != epoch || t.Deleted {
		return nil
	}
	// A leased attempt keeps the task until its agent has stopped it; an
	// admitted task no agent holds yet runs nowhere, so it can go back to
	// its queue at once.
	switch t.Status {
	case StatusAssigned, StatusRunning:
		return recordOf(now, "quota", Preempted{AttemptID: t.AttemptID, MachineID: t.AssignedMachine, By: by, Reason: reason})
	case StatusPending:
		return recordOf(now, "quota", Requeued{From: string(StatusPending), Reason: reason})
	}
	return nil
}
