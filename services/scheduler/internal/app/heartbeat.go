package app

import (
	"context"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Heartbeat is an agent's machine-level heartbeat.
type Heartbeat struct {
	AgentID, MachineID string
	Labels             []string
	AttemptIDs         []string // attempts the agent runs now
	FreeSlots          int
	// What the agent says about itself (see Agent).
	Slots              int
	Version, Isolation string
	Warnings           []string
}

// Stop tells an agent to stop an attempt.
type Stop struct {
	TaskID, AttemptID, Reason string
	GracePeriodSec            int
}

// HeartbeatAnswer is what an agent is told in answer to its heartbeat.
type HeartbeatAnswer struct {
	// Stops are the attempts it must stop: cancelled, preempted,
	// suspended, or no longer its lease.
	Stops []Stop
	// Drained tells it to claim no more work.
	Drained bool
}

// SendHeartbeat records the agent alive and answers which of its attempts
// it must stop and whether it is drained. Everything it reads comes from
// the round trip that records the heartbeat (HeartbeatReads); what it
// changes after that (a requeue, a release) is decided again on each
// task's current state, so reads that are stale by then change nothing.
func (a *App) SendHeartbeat(ctx context.Context, c Caller, h Heartbeat) (HeartbeatAnswer, error) {
	if err := c.checkAgent(h.AgentID); err != nil {
		return HeartbeatAnswer{}, err
	}
	now := a.now()
	reads, err := a.agents.Heartbeat(ctx, Agent{AgentID: h.AgentID, MachineID: h.MachineID, TenantID: tenantOf(c),
		IP: c.IP, Labels: h.Labels, FreeSlots: h.FreeSlots, LastHeartbeatAt: now, LostAfter: now.Add(a.cfg.AgentLostAfter),
		Slots: h.Slots, Version: h.Version, Isolation: h.Isolation, Warnings: h.Warnings}, h.AttemptIDs)
	if err != nil {
		return HeartbeatAnswer{}, err
	}
	// The three sets are disjoint: preempted tasks the agent no longer
	// runs, assigned ones it never got, and the ones it runs; so neither
	// change below alters what the other, or the answer, read.
	a.requeueStopped(ctx, h, reads.Preempted)
	a.releaseUnheld(ctx, h, reads.Unheld, now)
	byAttempt := map[string]domain.Task{}
	for _, t := range reads.Held {
		byAttempt[t.AttemptID] = t
	}
	answer := HeartbeatAnswer{Drained: reads.Drained}
	for _, att := range h.AttemptIDs {
		t, ok := byAttempt[att]
		if !ok {
			// The task moved on to another attempt (or is gone).
			answer.Stops = append(answer.Stops, Stop{AttemptID: att, Reason: "lease_lost", GracePeriodSec: domain.DefaultGracePeriod})
			continue
		}
		if stop, why := t.MustStop(att); stop {
			answer.Stops = append(answer.Stops, Stop{TaskID: t.ID, AttemptID: att, Reason: why, GracePeriodSec: t.Spec.GracePeriod})
		}
	}
	return answer, nil
}

// releaseUnheld takes back the tasks leased to the agent that it does not
// hold. A claim's lease is committed before its answer is sent; when the
// agent dies with its long poll open, or the connection breaks after the
// commit, the answer is lost. The agent registers every attempt it is
// answered as soon as it has journaled it and lists it in every heartbeat
// until its outcome is delivered (after a restart, from its journal), so
// an assigned attempt still missing from a heartbeat two AgentLostAfter
// after its lease never reached the agent. It goes back to pending as for
// an agent lost, without using a retry: nothing of it ran. Without this
// the task waited for its lease to run out (lease_ttl_sec, five minutes
// by default) beside an agent that was alive. The margin is the window in
// which an agent that does not answer at all is taken for lost; an answer
// later than that arrives at an agent that has lost the lease and whose
// StartTask is refused. Running attempts are left to their leases: their
// agent reported them.
func (a *App) releaseUnheld(ctx context.Context, h Heartbeat, ids []string, now time.Time) {
	if len(ids) == 0 {
		return
	}
	held := make(map[string]bool, len(h.AttemptIDs))
	for _, att := range h.AttemptIDs {
		held[att] = true
	}
	leasedBefore := now.Add(-2 * a.cfg.AgentLostAfter)
	released := a.each(ctx, ids, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		if t.Status != domain.StatusAssigned || t.AgentID != h.AgentID || held[t.AttemptID] || !t.AssignedAt.Before(leasedBefore) {
			return nil, nil
		}
		return t.ExpireLease(now, domain.ReasonAgentLost)
	})
	if released > 0 {
		a.log.Warn("agent does not hold its leases: releasing them", "agent", h.AgentID, "tasks", released)
	}
}

// requeueStopped returns admitted work the quota service preempted to its
// queue once the agent's heartbeat no longer lists the attempt: the process
// has stopped, so its quota is free for the preemptor.
func (a *App) requeueStopped(ctx context.Context, h Heartbeat, preempted []domain.Task) {
	if len(preempted) == 0 {
		return
	}
	running := make(map[string]bool, len(h.AttemptIDs))
	for _, att := range h.AttemptIDs {
		running[att] = true
	}
	var stopped []string
	for _, t := range preempted {
		if !running[t.AttemptID] {
			stopped = append(stopped, t.ID)
		}
	}
	a.each(ctx, stopped, func(t domain.Task, now time.Time) ([]domain.Record, error) {
		if t.Status != domain.StatusPreempted || t.AgentID != h.AgentID || running[t.AttemptID] {
			return nil, nil
		}
		return t.Requeue(now, domain.AgentActor(h.AgentID), "stopped after preemption")
	})
}

// NextHeartbeatBefore is when an agent heartbeating now is lost unless it
// heartbeats again.
func (a *App) NextHeartbeatBefore() time.Time { return a.now().Add(a.cfg.AgentLostAfter) }

// Watch subscribes to changes of one task (see Hub.Watch).
func (a *App) Watch(id string) (<-chan struct{}, func()) { return a.hub.Watch(id) }
