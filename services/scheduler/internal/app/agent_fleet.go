package app

import (
	"context"
	"fmt"
	"slices"
)

// checkOperator admits operators only: the fleet is not a tenant's to see.
// Operators call with Tenant "*" and no agent id; a shared-pool agent also
// has Tenant "*", so the agent id tells them apart.
func (c Caller) checkOperator() error {
	if c.Tenant != "*" || c.AgentID != "" {
		return fmt.Errorf("%w: the agent fleet is for operators", ErrForbidden)
	}
	return nil
}

// ListFleet returns the agents with these ids (every known one when ids is
// empty), by id: what their heartbeats said, whether they are drained and
// the tasks they hold.
func (a *App) ListFleet(ctx context.Context, c Caller, ids []string) ([]FleetAgent, error) {
	if err := c.checkOperator(); err != nil {
		return nil, err
	}
	return a.agents.Fleet(ctx, ids)
}

// SetDrain drains (drained) or undrains an agent and returns it as the
// fleet shows it. A drained agent's claims lease nothing; what it runs
// finishes. Draining an agent that has never heartbeated is allowed: it
// starts drained.
func (a *App) SetDrain(ctx context.Context, c Caller, agentID string, drained bool) (FleetAgent, error) {
	if err := c.checkOperator(); err != nil {
		return FleetAgent{}, err
	}
	if err := a.agents.SetDrained(ctx, agentID, drained, a.now()); err != nil {
		return FleetAgent{}, err
	}
	if !drained {
		// Wake waiting claims: an undrained agent's long poll should not
		// sit out its recheck interval.
		a.hub.WakeClaimers()
	}
	got, err := a.agents.Fleet(ctx, []string{agentID})
	if err != nil {
		return FleetAgent{}, err
	}
	if i := slices.IndexFunc(got, func(f FleetAgent) bool { return f.AgentID == agentID }); i >= 0 {
		return got[i], nil
	}
	return FleetAgent{Agent: Agent{AgentID: agentID}}, nil
}
