package domain

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The lease rules of the agent calls
// (docs/api/tasks.md, "Leases, attempts and heartbeats"): renew and
// progress by an attempt whose lease expired are 30003 whatever happened
// to the task since; start and complete by an attempt that is not the
// current one, and every call by an attempt never issued, are 30001;
// every call but complete by the current attempt whose lease ran out is
// 30003.

// agentCall is one of the four fenced agent calls on task at now by
// agent-1 (or agent) with attempt.
type agentCall func(task Task, now time.Time, agent, attempt string) error

var agentCalls = map[string]agentCall{
	"start": func(task Task, now time.Time, agent, attempt string) error {
		_, err := task.Start(now, agent, attempt)
		return err
	},
	"renew": func(task Task, now time.Time, agent, attempt string) error {
		_, err := task.Renew(now, agent, attempt, 0)
		return err
	},
	"progress": func(task Task, now time.Time, agent, attempt string) error {
		_, err := task.ReportProgress(now, agent, attempt, 50, "")
		return err
	},
	"complete": func(task Task, now time.Time, agent, attempt string) error {
		_, _, err := task.Complete(now, agent, attempt, Outcome{})
		return err
	},
}

func TestLeaseConformance(t *testing.T) {
	ttl := func(in *SpecInput) { in.LeaseTTL, in.RenewInterval, in.MaxRetries = ptr(30), ptr(10), ptr(2) }
	expiredAt := t0.Add(31 * time.Second) // leased at t0+1s for 30 s
	later := t0.Add(time.Hour)
	// Each history leaves att-1 (agent-1) in a different place; want gives
	// the code of each call by att-1 at later (nil: accepted).
	histories := []struct {
		name string
		make func(t *testing.T) Task
		want map[string]error
	}{
		{"lease ran out, not yet swept", func(t *testing.T) Task { return leased(t, ttl) },
			map[string]error{"start": ErrLeaseExpired, "renew": ErrLeaseExpired, "progress": ErrLeaseExpired, "complete": nil}},
		{"swept and requeued", func(t *testing.T) Task {
			task := leased(t, ttl)
			recs, err := task.ExpireLease(expiredAt, ReasonLeaseExpired)
			return run(t, task, recs, err)
		}, map[string]error{"start": ErrAttemptMismatch, "renew": ErrLeaseExpired, "progress": ErrLeaseExpired, "complete": ErrAttemptMismatch}},
		{"agent lost and requeued", func(t *testing.T) Task {
			task := leased(t, ttl)
			recs, err := task.ExpireLease(t0.Add(20*time.Second), ReasonAgentLost)
			return run(t, task, recs, err)
		}, map[string]error{"start": ErrAttemptMismatch, "renew": ErrLeaseExpired, "progress": ErrLeaseExpired, "complete": ErrAttemptMismatch}},
		{"swept, then another attempt took it", func(t *testing.T) Task {
			task := leased(t, ttl)
			recs, err := task.ExpireLease(expiredAt, ReasonLeaseExpired)
			task = run(t, task, recs, err)
			recs, err = task.Lease(expiredAt, "att-2", "agent-2", "m-2", "")
			task = run(t, task, recs, err)
			recs, err = task.Start(expiredAt, "agent-2", "att-2")
			return run(t, task, recs, err)
		}, map[string]error{"start": ErrAttemptMismatch, "renew": ErrLeaseExpired, "progress": ErrLeaseExpired, "complete": ErrAttemptMismatch}},
		{"swept with no retry left: failed", func(t *testing.T) Task {
			task := leased(t, func(in *SpecInput) { ttl(in); in.MaxRetries = ptr(0) })
			recs, err := task.Start(t0.Add(2*time.Second), "agent-1", "att-1")
			task = run(t, task, recs, err)
			recs, err = task.ExpireLease(expiredAt.Add(2*time.Second), ReasonLeaseExpired)
			return run(t, task, recs, err)
		}, map[string]error{"start": ErrImmutable, "renew": ErrLeaseExpired, "progress": ErrLeaseExpired, "complete": ErrImmutable}},
		{"swept, failed, retried by hand and completed by another", func(t *testing.T) Task {
			task := leased(t, func(in *SpecInput) { ttl(in); in.MaxRetries = ptr(0) })
			recs, err := task.Start(t0.Add(2*time.Second), "agent-1", "att-1")
			task = run(t, task, recs, err)
			recs, err = task.ExpireLease(expiredAt.Add(2*time.Second), ReasonLeaseExpired)
			task = run(t, task, recs, err)
			recs, err = task.Retry(expiredAt.Add(3*time.Second), "user")
			task = run(t, task, recs, err)
			recs, err = task.Lease(expiredAt.Add(4*time.Second), "att-2", "agent-2", "m-2", "")
			task = run(t, task, recs, err)
			recs, _, err = task.Complete(expiredAt.Add(5*time.Second), "agent-2", "att-2", Outcome{})
			return run(t, task, recs, err)
		}, map[string]error{"start": ErrAttemptMismatch, "renew": ErrLeaseExpired, "progress": ErrLeaseExpired, "complete": ErrAttemptMismatch}},
		{"preempted and requeued: not an expiry", func(t *testing.T) Task {
			task := leased(t, ttl)
			recs, err := task.Preempt(t0.Add(5*time.Second), "urgent", "priority")
			task = run(t, task, recs, err)
			recs, err = task.Requeue(t0.Add(6*time.Second), "scheduler", "preemptor finished")
			return run(t, task, recs, err)
		}, map[string]error{"start": ErrAttemptMismatch, "renew": ErrAttemptMismatch, "progress": ErrAttemptMismatch, "complete": ErrAttemptMismatch}},
	}
	for _, h := range histories {
		task := h.make(t)
		for name, call := range agentCalls {
			err := call(task, later, "agent-1", "att-1")
			if want := h.want[name]; (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
				t.Errorf("%s: %s by att-1 = %v, want %v", h.name, name, err, want)
			}
			// An attempt id never issued for the task, and att-1 named by
			// another agent, are 30001 in every history.
			if err := call(task, later, "agent-1", "att-never"); !errors.Is(err, ErrAttemptMismatch) {
				t.Errorf("%s: %s by an attempt never issued = %v, want 30001", h.name, name, err)
			}
			if err := call(task, later, "agent-9", "att-1"); !errors.Is(err, ErrAttemptMismatch) {
				t.Errorf("%s: %s of att-1 by agent-9 = %v, want 30001", h.name, name, err)
			}
		}
	}
}

func TestPastAttemptsAreBounded(t *testing.T) {
	task := submitted(t, func(in *SpecInput) { in.MaxRetries = ptr(100) })
	now := t0
	for i := range MaxPastAttempts + 5 {
		now = now.Add(time.Minute)
		recs, err := task.Lease(now, fmt.Sprintf("att-%d", i), "agent-1", "m-1", "")
		task = run(t, task, recs, err)
		recs, err = task.Start(now, "agent-1", fmt.Sprintf("att-%d", i))
		task = run(t, task, recs, err)
		recs, err = task.ExpireLease(now, ReasonAgentLost)
		task = run(t, task, recs, err)
	}
	if len(task.PastAttempts) != MaxPastAttempts {
		t.Fatalf("%d past attempts kept, want %d", len(task.PastAttempts), MaxPastAttempts)
	}
	if task.PastAttempts[0].ID != "att-5" || task.PastAttempts[MaxPastAttempts-1].ID != fmt.Sprintf("att-%d", MaxPastAttempts+4) {
		t.Fatalf("kept %s … %s, want the latest", task.PastAttempts[0].ID, task.PastAttempts[MaxPastAttempts-1].ID)
	}
	// The newest remembered expiry is 30003, one forgotten is 30001.
	if _, err := task.Renew(now, "agent-1", "att-5", 0); !errors.Is(err, ErrLeaseExpired) {
		t.Errorf("renew by the oldest remembered attempt = %v, want 30003", err)
	}
	if _, err := task.Renew(now, "agent-1", "att-4", 0); !errors.Is(err, ErrAttemptMismatch) {
		t.Errorf("renew by a forgotten attempt = %v, want 30001", err)
	}
}

// Remembering an attempt must not change the history of the task it was
// applied to: Apply works on copies.
func TestRememberAttemptDoesNotAlias(t *testing.T) {
	task := submitted(t, func(in *SpecInput) { in.MaxRetries = ptr(100) })
	for i := range MaxPastAttempts {
		recs, err := task.Lease(t0, fmt.Sprintf("att-%d", i), "agent-1", "m-1", "")
		task = run(t, task, recs, err)
		recs, err = task.ExpireLease(t0, ReasonLeaseExpired)
		task = run(t, task, recs, err)
	}
	before := fmt.Sprint(task.PastAttempts)
	recs, err := task.Lease(t0, "att-x", "agent-1", "m-1", "")
	next := run(t, task, recs, err)
	recs, err = next.ExpireLease(t0, ReasonLeaseExpired)
	_ = run(t, next, recs, err)
	if after := fmt.Sprint(task.PastAttempts); after != before {
		t.Errorf("the earlier task's past attempts changed:\n%s\n%s", before, after)
	}
}

// An attempt taken back from its lost agent before its lease would have
// run out learns that, not that its lease expired at a time to come; one
// whose lease ran out learns when.
func TestLeaseEndedSaysWhy(t *testing.T) {
	task := leased(t, nil) // at t0+1s for 300 s
	recs, err := task.ExpireLease(t0.Add(20*time.Second), ReasonAgentLost)
	task = run(t, task, recs, err)
	_, err = task.Renew(t0.Add(30*time.Second), "agent-1", "att-1", 0)
	if !errors.Is(err, ErrLeaseExpired) || !strings.Contains(err.Error(), "agent being lost") {
		t.Errorf("renew before the lease would have run out = %v", err)
	}
	_, err = task.Renew(t0.Add(302*time.Second), "agent-1", "att-1", 0)
	if want := "at " + t0.Add(301*time.Second).Format(time.RFC3339); !errors.Is(err, ErrLeaseExpired) || !strings.Contains(err.Error(), want) {
		t.Errorf("renew after it would have run out = %v, want %q", err, want)
	}
}
