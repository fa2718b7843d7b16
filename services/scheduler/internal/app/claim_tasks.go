package app

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// ClaimRequest is an agent asking for work.
type ClaimRequest struct {
	AgentID, MachineID, RequestID string
	Labels, Types                 []string
	Limit                         int
	Wait                          time.Duration // long poll; 0 answers at once
}

// ClaimTasks leases up to Limit tasks to the agent. The same agent and
// request id always get the same tasks back (a retried claim whose answer
// was lost does not lease more). With Wait it blocks until work appears or
// the wait ends, woken by submissions rather than sleeping a fixed interval.
func (a *App) ClaimTasks(ctx context.Context, c Caller, r ClaimRequest) ([]domain.Task, string, error) {
	if err := c.checkAgent(r.AgentID); err != nil {
		return nil, "", err
	}
	if r.RequestID == "" {
		r.RequestID = uuid.NewString()
	}
	if r.Limit <= 0 {
		r.Limit = 1
	}
	// A claim proves the agent alive, like a heartbeat, whether it gets
	// work or not: an agent that speaks only the lease protocol polls with
	// claims, and its machine counts as live (for broadcasts) while it
	// does. It is alive when its claim arrives; a long poll that ends
	// empty proves nothing more (the agent may have died or stopped while
	// it waited, and its liveness must not outlast its last sign), while
	// tasks answered are taken, so that agent is seen again with the
	// slots they fill.
	a.seen(ctx, c, r, r.Limit)
	tasks, err := a.claimWaiting(ctx, c, r)
	if err == nil && len(tasks) > 0 {
		a.seen(ctx, c, r, r.Limit-len(tasks))
	}
	return tasks, r.RequestID, err
}

// seen records the agent of a claim as alive now, with free slots for
// that many more tasks (what it asked for and did not get). A failure to
// record it fails nothing: the next claim or heartbeat records it.
func (a *App) seen(ctx context.Context, c Caller, r ClaimRequest, free int) {
	_ = a.agents.Seen(ctx, Agent{AgentID: r.AgentID, MachineID: r.MachineID, TenantID: tenantOf(c), IP: c.IP,
		Labels: r.Labels, FreeSlots: max(free, 0), LastHeartbeatAt: a.now(), LostAfter: a.now().Add(a.cfg.AgentLostAfter)})
}

// claimWaiting is ClaimTasks's long poll: claims until work appears or
// the wait ends.
func (a *App) claimWaiting(ctx context.Context, c Caller, r ClaimRequest) ([]domain.Task, error) {
	wait := min(r.Wait, a.cfg.MaxWait)
	deadline := a.now().Add(wait)
	// Registered before the first look, so work committed in between
	// wakes it.
	w := a.hub.Wait(ClaimWaiter{AgentID: r.AgentID, Tenant: c.Tenant, Machine: r.MachineID, IP: c.IP, Labels: r.Labels, Types: r.Types})
	defer w.Stop()
	for {
		// A drained agent's claim leases nothing but still waits like an
		// empty one (no busy loop), and still gets the tasks of a claim it
		// repeats; an undrain takes effect at the next recheck.
		drained, err := a.agents.Drained(ctx, r.AgentID)
		if err != nil {
			return nil, err
		}
		w.Claiming(drained)
		tasks, err := a.claimOnce(ctx, c, r, drained)
		w.Claimed(tasks)
		if err != nil || len(tasks) > 0 {
			return tasks, err
		}
		left := deadline.Sub(a.now())
		if left <= 0 {
			return nil, nil
		}
		// Re-check every ClaimRecheck anyway: retry_at passing, or another
		// replica's work when NOTIFY is lost, wake nobody.
		select {
		case <-ctx.Done():
			return nil, nil
		case <-w.Woken():
		case <-time.After(min(left, a.cfg.ClaimRecheck)):
		}
	}
}

func (a *App) claimOnce(ctx context.Context, c Caller, r ClaimRequest, drained bool) ([]domain.Task, error) {
	now := a.now()
	f := ClaimFilter{Tenant: c.Tenant, Machine: r.MachineID, IP: c.IP, Labels: r.Labels, Types: r.Types, Limit: r.Limit, Now: now}
	if drained {
		f.Limit = 0
	}
	out, err := a.tasks.Claim(ctx, r.AgentID, r.RequestID, f, func(candidates []domain.Task) ([][]domain.Record, error) {
		leases := make([][]domain.Record, len(candidates))
		scattered := map[string]bool{} // one task per scatter fan-out per machine
		for i, t := range candidates {
			// The database compares times to the microsecond, the domain
			// to the nanosecond: a task submitted within the microsecond
			// of this claim's clock matches retry_at <= now but is not yet
			// claimable. It is left for the next claim, not an error.
			if !t.Claimable(now) {
				continue
			}
			if t.Spec.Mode == domain.ModeScatter {
				if scattered[t.FanoutID] {
					continue
				}
				scattered[t.FanoutID] = true
			}
			recs, err := t.Lease(now, uuid.NewString(), r.AgentID, r.MachineID, r.RequestID)
			if err != nil {
				return nil, err
			}
			leases[i] = withIP(recs, c.IP)
		}
		return leases, nil
	})
	if err != nil {
		return nil, err
	}
	return heldByClaim(out, r.AgentID, r.RequestID), nil
}

// heldByClaim keeps the tasks this claim (agent, request id) still holds.
// A claim's retry is answered with the tasks it leased as they are now,
// and since then a task may have been released — its agent found lost
// while the answer was lost with the connection — and leased to another
// agent, or run and finished. Answered again, it would run a second time
// beside its new attempt, or after its end. Tasks just leased are held
// by the claim.
func heldByClaim(tasks []domain.Task, agentID, requestID string) []domain.Task {
	held := tasks[:0]
	for _, t := range tasks {
		if t.Status.Leased() && t.AgentID == agentID && t.ClaimRequestID == requestID {
			held = append(held, t)
		}
	}
	return held
}

// tenantOf is the tenant an agent serves ("" for the shared pool).
func tenantOf(c Caller) string {
	if c.Tenant == "*" {
		return ""
	}
	return c.Tenant
}
