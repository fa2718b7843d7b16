package domain

import "time"

// Event is a fact about one task, named in the past tense.
type Event interface{ EventName() string }

// Record is an event with when and by whom it happened.
type Record struct {
	Event Event
	At    time.Time
	Actor string
	// IP is the address of the client whose request caused the event
	// ("" when none did: the sweeper, admission decisions).
	IP string
}

type (
	Submitted struct {
		ID, TenantID, CreatedBy, RequestID, FanoutID string
		Spec                                         Spec
		// ClusterQueue admits the task; "" = it needs no admission.
		ClusterQueue string
		// HeldForDependencies: the task enters ClusterQueue only with
		// DependenciesMet (holdsForDependencies).
		HeldForDependencies bool
	}
	Updated struct {
		Spec                Spec
		ClusterQueue        string
		HeldForDependencies bool
	}
	// DependenciesMet: a task held for its dependencies saw them all
	// completed and now waits in its ClusterQueue.
	DependenciesMet struct {
		Spec         Spec
		ClusterQueue string
	}
	Admitted struct {
		Queue, ClusterQueue string
		Flavors             map[string]string
	}
	Leased struct {
		AttemptID, AgentID, MachineID, ClaimRequestID string
		LeaseExpiresAt                                time.Time
	}
	// MachineID of Started, Succeeded, Failed and Preempted is the machine
	// the attempt was leased to, for the audit trail's machine_id
	// (docs/api/audit.md); the fold does not read it (Leased set
	// AssignedMachine). Events recorded before it existed carry "".
	Started struct {
		AttemptID, MachineID string
		LeaseExpiresAt       time.Time
	}
	Progressed struct {
		AttemptID string
		Progress  int
		Message   string
	}
	LeaseRenewed struct {
		AttemptID      string
		LeaseExpiresAt time.Time
	}
	Succeeded struct {
		AttemptID string
		MachineID string
		ExitCode  int
		Result    *Result
		EndedAt   time.Time
	}
	Failed struct {
		AttemptID string
		MachineID string
		ExitCode  *int
		Error     string
		Reason    string // exit_code, timeout, spawn_error, killed, …
		Result    *Result
		EndedAt   time.Time
		// RetryFollows: a RetryScheduled is recorded with the failure, so
		// the task is not failed for good (notifications wait for that).
		RetryFollows bool
	}
	RetryScheduled struct {
		RetryCount int
		RetryAt    time.Time
		Manual     bool
	}
	LeaseExpired struct {
		AttemptID, AgentID, Reason string
		RetryCount                 int
		Failed                     bool
	}
	Preempted    struct{ AttemptID, MachineID, By, Reason string }
	Checkpointed struct {
		AttemptID, Key, SHA256 string
		SizeBytes              int64
	}
	Suspended struct{ AttemptID, Reason string }
	Requeued  struct{ From, Reason string }
	Canceled  struct{ Reason, AttemptID string }
	Deleted   struct{}
	Expired   struct{}
)

func (Submitted) EventName() string       { return "TaskSubmitted" }
func (Updated) EventName() string         { return "TaskUpdated" }
func (Admitted) EventName() string        { return "TaskAdmitted" }
func (DependenciesMet) EventName() string { return "TaskDependenciesMet" }
func (Leased) EventName() string          { return "TaskLeased" }
func (Started) EventName() string         { return "TaskStarted" }
func (Progressed) EventName() string      { return "TaskProgressed" }
func (LeaseRenewed) EventName() string    { return "TaskLeaseRenewed" }
func (Succeeded) EventName() string       { return "TaskSucceeded" }
func (Failed) EventName() string          { return "TaskFailed" }
func (RetryScheduled) EventName() string  { return "TaskRetryScheduled" }
func (LeaseExpired) EventName() string    { return "TaskLeaseExpired" }
func (Preempted) EventName() string       { return "TaskPreempted" }
func (Suspended) EventName() string       { return "TaskSuspended" }
func (Checkpointed) EventName() string    { return "TaskCheckpointed" }
func (Requeued) EventName() string        { return "TaskRequeued" }
func (Canceled) EventName() string        { return "TaskCanceled" }
func (Deleted) EventName() string         { return "TaskDeleted" }
func (Expired) EventName() string         { return "TaskExpired" }

// Apply folds one recorded event into t: the one fold of task events. The
// inline projection, the task_views read model, the rebuild from the event
// store and the gateway's live streams (through package lifecycle) all
// move a task with it, so they agree by construction. It never fails:
// events are facts. An event it has no case for only moves the version and
// the update time; Handles reports such events, and the lifecycle-coverage
// tests fail on them.
func Apply(t Task, r Record) Task {
	apply(&t, r)
	return t
}

// Handles reports whether Apply has a case for e.
func Handles(e Event) bool {
	return apply(&Task{}, Record{Event: e})
}

// apply is Apply in place; it reports false when r.Event has no case.
func apply(t *Task, r Record) bool {
	// Every event counts, handled or not: Version is the number of events
	// the task has, which the event store's (aggregate_id, version) key and
	// every version guard downstream compare.
	t.Version++
	t.UpdatedAt = r.At
	switch e := r.Event.(type) {
	case Submitted:
		// The first event: the state is built from it alone, keeping only
		// the count in Version.
		*t = Task{ID: e.ID, TenantID: e.TenantID, CreatedBy: e.CreatedBy, RequestID: e.RequestID,
			FanoutID: e.FanoutID, Spec: e.Spec, Version: t.Version, Status: StatusPending,
			CreatedAt: r.At, UpdatedAt: r.At, RetryAt: r.At, ClusterQueue: e.ClusterQueue}
		t.HeldForDependencies = e.HeldForDependencies
		t.queueForAdmission()
	case Updated:
		t.Spec, t.ClusterQueue, t.HeldForDependencies = e.Spec, e.ClusterQueue, e.HeldForDependencies
		t.queueForAdmission()
	case DependenciesMet:
		t.Spec, t.ClusterQueue, t.HeldForDependencies = e.Spec, e.ClusterQueue, false
		t.queueForAdmission()
	case Admitted:
		t.Admitted, t.Flavors = true, e.Flavors
	case Leased:
		t.rememberAttempt(false)
		t.clearAttempt()
		t.Status = StatusAssigned
		// A new attempt starts clean (clearAttempt above): nothing of an
		// earlier attempt, its exit code, error or progress, may read as
		// this one's.
		t.AttemptID, t.AgentID, t.AssignedMachine, t.ClaimRequestID = e.AttemptID, e.AgentID, e.MachineID, e.ClaimRequestID
		t.AssignedAt, t.LeaseExpiresAt, t.LastHeartbeatAt = r.At, e.LeaseExpiresAt, r.At
	case Started:
		t.Status = StatusRunning
		t.StartedAt, t.LeaseExpiresAt, t.LastHeartbeatAt = r.At, e.LeaseExpiresAt, r.At
	// Any call of the attempt proves its agent alive: LastHeartbeatAt moves
	// with starts, progress and renewals, not only with heartbeats.
	case Progressed:
		t.Progress, t.ProgressMessage, t.LastHeartbeatAt = e.Progress, e.Message, r.At
	case LeaseRenewed:
		t.LeaseExpiresAt, t.LastHeartbeatAt = e.LeaseExpiresAt, r.At
	case Succeeded:
		t.releaseAdmission()
		code := e.ExitCode
		t.Status, t.ExitCode, t.Result, t.EndedAt, t.Error = StatusCompleted, &code, e.Result, e.EndedAt, ""
		// A completed task reads as having run in full: progress 100, and a
		// start time even when the attempt ended before its start was
		// recorded.
		t.Progress = 100
		if t.StartedAt.IsZero() {
			t.StartedAt = e.EndedAt
		}
		t.LeaseExpiresAt = time.Time{}
		// Remembered after the task moves on (a retry, a new lease), so that
		// a repeated CompleteTask of this attempt is answered as a repeat
		// instead of being refused (Complete).
		t.FinishedAttemptID, t.FinishedStatus, t.FinishedAt = e.AttemptID, StatusCompleted, e.EndedAt
	case Failed:
		t.releaseAdmission()
		t.Status, t.ExitCode, t.Error, t.Result, t.EndedAt = StatusFailed, e.ExitCode, e.Error, e.Result, e.EndedAt
		t.LeaseExpiresAt = time.Time{}
		t.FinishedAttemptID, t.FinishedStatus, t.FinishedAt = e.AttemptID, StatusFailed, e.EndedAt
	case RetryScheduled:
		// A pending task reads the same however it got there (a new task,
		// a lease that expired, a retry): no attempt, no times of one, no
		// exit code or error (docs/api/tasks.md, "Task lifecycle"). The failed
		// attempt is remembered (its repeated CompleteTask is answered by
		// FinishedAttemptID) and its exit code and error stay in its
		// TaskFailed event. Its quota was given back when it failed, so
		// the retry waits for admission again.
		t.rememberAttempt(false)
		t.clearAttempt()
		t.Status, t.RetryCount, t.RetryAt = StatusPending, e.RetryCount, e.RetryAt
		t.queueForAdmission()
	case LeaseExpired:
		// A lost lease counts against max_retries like a failed attempt
		// (unless its agent never started it), but the task is pending
		// again at once: an agent's crash is not the task's fault and
		// should not wait out retry_delay.
		t.rememberAttempt(true)
		t.RetryCount = e.RetryCount
		t.LeaseExpiresAt = time.Time{}
		if e.Failed {
			t.releaseAdmission()
			t.Status, t.EndedAt = StatusFailed, r.At
			t.Error = "lease expired: " + e.Reason
		} else {
			// The task keeps its admission: another agent takes it over.
			t.clearAttempt()
			t.Status, t.RetryAt = StatusPending, r.At
		}
	case Preempted:
		// The attempt id stays until the task is requeued: the agent may
		// still be running the attempt until its heartbeat tells it to stop
		// (MustStop), and its late calls stay fenced by that id.
		t.Status, t.PreemptedBy = StatusPreempted, e.By
		t.LeaseExpiresAt = time.Time{}
		// The record outlives the requeue (PreemptedBy does not): the task
		// API shows who preempted the task and what it saved.
		t.Preemption = &Preemption{PreemptedAt: r.At, PreemptedBy: e.By}
	case Checkpointed:
		t.Checkpoint = &Checkpoint{Key: e.Key, SizeBytes: e.SizeBytes, SHA256: e.SHA256, AttemptID: e.AttemptID, SavedAt: r.At}
		if t.Status == StatusPreempted && t.Preemption != nil {
			p := *t.Preemption
			p.Checkpoint = e.Key
			t.Preemption = &p
		}
	case Suspended:
		// Suspension gives the quota back; resuming queues the task again.
		t.releaseAdmission()
		t.Status = StatusSuspended
		t.LeaseExpiresAt = time.Time{}
	case Requeued:
		t.rememberAttempt(false)
		t.clearAttempt()
		// A new stay in the queue: admission starts over under a new epoch,
		// and the task may be claimed at once when it needs none.
		t.Status, t.RetryAt, t.PreemptedBy = StatusPending, r.At, ""
		t.queueForAdmission()
	case Canceled:
		t.releaseAdmission()
		t.Status, t.EndedAt = StatusCancelled, r.At
		// The attempt id stays, so the agent's heartbeat still names the
		// attempt and learns it must stop (MustStop).
		if e.Reason != "" {
			t.Error = "cancelled: " + e.Reason
		}
		t.LeaseExpiresAt = time.Time{}
	case Deleted, Expired:
		t.releaseAdmission()
		// A tombstone, not a removal: the row stays so that late calls of an
		// attempt are answered (and told to stop), and a replay of the
		// events ends in the same state.
		t.Deleted = true
	default:
		return false
	}
	return true
}

// queueForAdmission starts a new stay in the task's ClusterQueue, called
// after t.Version counts the event that queued it. The quota service
// derives the same stays from the same events (see package doc).
func (t *Task) queueForAdmission() {
	t.Admitted, t.Flavors, t.AdmissionEpoch = false, nil, 0
	// The epoch is the version of the event that began the stay. A decision
	// names it, so one about an earlier stay is recognised and ignored
	// (Admit, Evict). A task held for its dependencies has no stay yet.
	if t.ClusterQueue != "" && !t.HeldForDependencies {
		t.AdmissionEpoch = t.Version
	}
}

// releaseAdmission gives the task's quota back.
func (t *Task) releaseAdmission() {
	t.Admitted, t.Flavors = false, nil
}

// rememberAttempt keeps the current attempt among the task's past ones,
// before a new lease or a requeue replaces it or, with leaseExpired, when
// its lease ran out. An attempt already remembered is updated in place, so
// an attempt appears once; only the last MaxPastAttempts are kept.
func (t *Task) rememberAttempt(leaseExpired bool) {
	if t.AttemptID == "" {
		return
	}
	p := PastAttempt{ID: t.AttemptID, AgentID: t.AgentID, LeaseExpiresAt: t.LeaseExpiresAt, LeaseExpired: leaseExpired,
		Preempted: t.Status == StatusPreempted}
	for i, old := range t.PastAttempts {
		if old.ID == p.ID {
			// Already remembered when its lease expired: that stays true,
			// and so do its agent and expiry (a retry scheduled since has
			// cleared them from the task).
			p.LeaseExpired = p.LeaseExpired || old.LeaseExpired
			p.Preempted = p.Preempted || old.Preempted
			if p.LeaseExpiresAt.IsZero() {
				p.LeaseExpiresAt = old.LeaseExpiresAt
			}
			if p.AgentID == "" {
				p.AgentID = old.AgentID
			}
			t.PastAttempts[i] = p
			return
		}
	}
	// A new slice each time: Apply works on a copy of the task, and the
	// caller's copy must not see this one's history change under it.
	past := make([]PastAttempt, 0, min(len(t.PastAttempts)+1, MaxPastAttempts))
	if drop := len(t.PastAttempts) + 1 - MaxPastAttempts; drop > 0 {
		past = append(past, t.PastAttempts[drop:]...)
	} else {
		past = append(past, t.PastAttempts...)
	}
	t.PastAttempts = append(past, p)
}

// clearAttempt forgets the current attempt before a new one or a requeue.
func (t *Task) clearAttempt() {
	t.AttemptID, t.AgentID, t.AssignedMachine, t.ClaimRequestID = "", "", "", ""
	t.AssignedAt, t.StartedAt, t.EndedAt, t.LeaseExpiresAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	t.LastHeartbeatAt = time.Time{}
	t.ExitCode, t.Error, t.Result = nil, "", nil
	t.Progress, t.ProgressMessage = 0, ""
}

// Fold replays records from the zero state.
func Fold(records []Record) Task {
	var t Task
	for _, r := range records {
		t = Apply(t, r)
	}
	return t
}
