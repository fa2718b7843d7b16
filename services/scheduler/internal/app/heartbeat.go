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

// SendHeartbeat records the agent alive and answers which of its attempts
// it must stop: cancelled, preempted, suspended, or no longer its lease.
func (a *App) SendHeartbeat(ctx context.Context, c Caller, h Heartbeat) ([]Stop, error) {
	if err := c.checkAgent(h.AgentID); err != nil {
		return nil, err
	}
	now := a.now()
	if err := a.agents.Heartbeat(ctx, Agent{AgentID: h.AgentID, MachineID: h.MachineID, TenantID: tenantOf(c),
		IP: c.IP, Labels: h.Labels, FreeSlots: h.FreeSlots, LastHeartbeatAt: now, LostAfter: now.Add(a.cfg.AgentLostAfter),
		Slots: h.Slots, Version: h.Version, Isolation: h.Isolation, Warnings: h.Warnings}); err != nil {
		return nil, err
	}
	if err := a.requeueStopped(ctx, h); err != nil {
		return nil, err
	}
	if len(h.AttemptIDs) == 0 {
		return nil, nil
	}
	tasks, err := a.tasks.ByAttempts(ctx, h.AgentID, h.AttemptIDs)
	if err != nil {
		return nil, err
	}
	byAttempt := map[string]domain.Task{}
	for _, t := range tasks {
		byAttempt[t.AttemptID] = t
	}
	var stops []Stop
	for _, att := range h.AttemptIDs {
		t, ok := byAttempt[att]
		if !ok {
			// The task moved on to another attempt (or is gone).
			stops = append(stops, Stop{AttemptID: att, Reason: "lease_lost", GracePeriodSec: domain.DefaultGracePeriod})
			continue
		}
		if stop, why := t.MustStop(att); stop {
			stops = append(stops, Stop{TaskID: t.ID, AttemptID: att, Reason: why, GracePeriodSec: t.Spec.GracePeriod})
		}
	}
	return stops, nil
}

// requeueStopped returns admitted work the quota service preempted to its
// queue once the agent's heartbeat no longer lists the attempt: the process
// has stopped, so its quota is free for the preemptor.
func (a *App) requeueStopped(ctx context.Context, h Heartbeat) error {
	preempted, err := a.tasks.PreemptedOf(ctx, h.AgentID)
	if err != nil || len(preempted) == 0 {
		return err
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
		return t.Requeue(now, "agent:"+h.AgentID, "stopped after preemption")
	})
	return nil
}

// NextHeartbeatBefore is when an agent heartbeating now is lost unless it
// heartbeats again.
func (a *App) NextHeartbeatBefore() time.Time { return a.now().Add(a.cfg.AgentLostAfter) }

// Watch subscribes to changes of one task (see Hub.Watch).
func (a *App) Watch(id string) (<-chan struct{}, func()) { return a.hub.Watch(id) }
