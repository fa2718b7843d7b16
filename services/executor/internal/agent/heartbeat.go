package agent

import (
	"context"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
)

// heartbeatRetry is the wait before the heartbeat after a failed one.
const heartbeatRetry = time.Second

// heartbeatLoop sends the machine heartbeat and obeys its stop list. A
// call refused because the agent's address changed wakes it early: the
// heartbeat is what moves the token to the new address.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	for {
		next := a.heartbeat(ctx)
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-a.heartbeatWake:
			t.Stop()
		}
	}
}

// heartbeat sends one heartbeat and returns the delay to the next.
func (a *Agent) heartbeat(ctx context.Context) time.Duration {
	a.mu.Lock()
	lapse := a.lapses
	var ids []string
	for id, at := range a.runs {
		if at.task.Origin == journal.OriginServer {
			ids = append(ids, id)
		}
	}
	a.mu.Unlock()
	free := max(a.cfg.Slots-int(a.running.Load()), 0)

	cctx, cancel := a.rpcCtx(ctx)
	sent := time.Now()
	resp, err := a.lease.SendHeartbeat(cctx, &taskv1.SendHeartbeatRequest{
		AgentId: a.cfg.AgentID, MachineId: a.cfg.MachineID, Labels: a.cfg.Labels,
		AttemptIds: ids, FreeSlots: int32(free), Slots: int32(a.cfg.Slots), Version: a.cfg.Version,
		Isolation: a.isolation.Mode(), Warnings: a.isolation.Warnings(),
	})
	cancel()
	if ctx.Err() == nil {
		a.metrics.heartbeat(ctx, sent, err)
	}
	interval := a.cfg.HeartbeatInterval
	a.mu.Lock()
	was := a.reachable
	a.reachable = err == nil
	if err == nil {
		a.lastHeartbeat = a.now()
	}
	a.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("heartbeat failed", "err", err)
		}
		// Soon again: the fences run out while the server is not heard
		// from, and the first answer after an outage renews them.
		return min(interval, heartbeatRetry)
	}
	a.heard(sent)
	a.renewFences()
	if !was {
		// The server is back: deliver what waited.
		wake(a.syncWake)
	}
	if drained := resp.GetDrained(); a.drained.Swap(drained) != drained {
		if drained {
			a.log.Info("drained by an operator: claiming nothing new; running tasks finish")
		} else {
			a.log.Info("undrained by an operator: claiming again")
		}
	}
	for _, s := range resp.GetStop() {
		at := a.active(s.GetAttemptId())
		if at == nil {
			continue
		}
		a.log.Info("server stops attempt", "task_id", s.GetTaskId(), "attempt_id", s.GetAttemptId(), "reason", s.GetReason())
		reason := s.GetReason()
		if reason == "" {
			reason = reasonCancelled
		}
		grace := time.Duration(s.GetGracePeriodSec()) * time.Second
		at.requestStop(stopRequest{reason: reason, grace: &grace})
	}
	// The stops are delivered: attempts waiting for the answer of a
	// heartbeat sent after a lapse may start (awaitFence).
	a.mu.Lock()
	a.stopsLapse = max(a.stopsLapse, lapse)
	a.mu.Unlock()
	if nb := resp.GetNextHeartbeatBefore(); nb != nil {
		if d := nb.AsTime().Sub(a.now()) / 2; d > 0 && d < interval {
			interval = max(d, 100*time.Millisecond)
		}
	}
	return interval
}
