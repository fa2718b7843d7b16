package agent

import (
	"context"
	"time"

	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
	"github.com/taskmesh/taskmesh/services/executor/internal/shim"
)

// Fencing keeps a task from running on two agents at once
// (docs/executor.md, "Fencing"). The server leases an agent's tasks
// elsewhere once it has not heard from the agent for AgentLostAfter,
// whether the agent died, was stopped (SIGSTOP) or was cut off, and
// whether its task obeys SIGTERM or not. So every task leased from the
// server runs under a fence held by its shim, which outlives the agent:
// unless the agent renews it, the shim stops the task when the fence
// passes and kills it fenceGrace later (package fence: the times). The agent renews the fences after
// each heartbeat the server answers, to a point it can prove is early
// enough:
//
//	contact + AgentLostAfter − margin − fenceGrace
//
// where contact is when the last answered heartbeat or claim was sent.
// The server recorded the call no earlier than that, so it cannot find
// the agent lost before contact + AgentLostAfter, and the task is dead by
// then with margin to spare. Only lengths cross between processes, never
// times, and the fence is measured on the monotonic clock (time.Now, not
// the configurable Now): it is about real time passing, which a test's
// fake clock must not stop.

// minFenceAtSpawn: a task is not started with less fence than this left;
// it waits for the next answered heartbeat instead.
const minFenceAtSpawn = time.Second

// fenced reports whether t runs under a fence: a task leased from the
// server, or a local task whose creator asked for one (owner_fence.go).
// Other local tasks have no lease to lose.
func (a *Agent) fenced(t journal.Task) bool {
	return (t.Origin == journal.OriginServer && a.lease != nil) || t.OwnerFenced()
}

// fenceLeftFor is how long t may run from now unless its fence is
// renewed: the server's (fenceLeft) or its creator's.
func (a *Agent) fenceLeftFor(t journal.Task) time.Duration {
	if t.OwnerFenced() {
		return a.ownerFenceLeft(t.ID)
	}
	return a.fenceLeft()
}

// fenceGraceFor is the SIGKILL grace after t's fence passes.
func (a *Agent) fenceGraceFor(t journal.Task) time.Duration {
	if t.OwnerFenced() {
		return t.OwnerFenceGrace
	}
	return a.cfg.fenceGrace
}

// heard records that the server answered a call the agent sent at sent.
func (a *Agent) heard(sent time.Time) {
	a.mu.Lock()
	silent := time.Since(a.contact)
	lapsed := !a.contact.IsZero() && silent >= a.cfg.fence
	if a.contact.IsZero() || lapsed {
		// A lapse: the server may have found this agent lost and leased
		// its attempts elsewhere meanwhile (awaitFence).
		a.lapses++
	}
	if sent.After(a.contact) {
		a.contact = sent
	}
	a.mu.Unlock()
	if lapsed {
		// Operators (and the fault-injection report) look for this line:
		// every task leased from the server was stopped by its fence.
		a.metrics.fenceLapsed(context.Background())
		a.log.Warn("fence passed: the server answered none of this agent's calls for longer than the fence",
			"silent_for", silent.Round(time.Millisecond), "fence", a.cfg.fence)
	}
}

// fenceLeft is how long a fenced task may run from now unless the server
// hears from the agent again; 0 or less before the server was first heard
// from by this process, since what the server last heard (before a
// restart) is unknown.
func (a *Agent) fenceLeft() time.Duration {
	a.mu.Lock()
	c := a.contact
	a.mu.Unlock()
	if c.IsZero() {
		return 0
	}
	return time.Until(c.Add(a.cfg.fence))
}

// renewFences has every fenced attempt renew its shim's fence to
// fenceLeft. Each attempt's goroutine does it (supervise), and tells a
// fenced attempt from another: at.task is that goroutine's to read.
func (a *Agent) renewFences() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, at := range a.runs {
		wake(at.fenceWake)
	}
}

// awaitFence waits until a fenced task may start: fenceLeft is at least
// minFenceAtSpawn. After a restart, before the first heartbeat, and while
// the server is away, it waits for an answered heartbeat; a stop request
// (the server found the lease lost, once it is back) ends the wait. It
// returns the fence to start with, or the stop, or 0 and nil when ctx
// ended.
//
// A renewed fence is not enough after a lapse (heard): the server may
// have leased the attempt elsewhere while it did not hear from the agent,
// and the answer that renewed the fence — a claim's, or a heartbeat sent
// before the lapse was seen — need not say so. Started then, the process
// ran beside the new attempt until the next heartbeat's stop and its
// grace. So an attempt registered before the latest lapse also waits for
// the stops of a heartbeat sent after it (stopsKnown); the heartbeat
// delivers them before it counts, so they are in at.stopCh by then.
//
// A task under its creator's fence waits for its creator's renewal
// instead, and no longer than the fence it was created with: a creator
// that has not renewed it by then is gone, and the task fails fenced
// without having run.
func (a *Agent) awaitFence(ctx context.Context, at *attempt) (time.Duration, *stopRequest) {
	t := at.task
	least := minFenceAtSpawn
	if t.OwnerFenced() {
		// A creator may renew with as little as its own fence.
		least = min(least, t.OwnerFence/2)
	}
	ready := func() (time.Duration, *stopRequest, bool) {
		d := a.fenceLeftFor(t)
		if d < least || !(t.OwnerFenced() || a.stopsKnown(at)) {
			return 0, nil, false
		}
		select {
		case r := <-at.stopCh:
			return 0, &r, true
		default:
			return d, nil, true
		}
	}
	if d, stop, ok := ready(); ok {
		return d, stop
	}
	if !t.OwnerFenced() {
		wake(a.heartbeatWake)
	}
	giveUp := time.Now().Add(t.OwnerFence)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, nil
		case r := <-at.stopCh:
			return 0, &r
		case now := <-poll.C:
			if d, stop, ok := ready(); ok {
				return d, stop
			}
			if t.OwnerFenced() && now.After(giveUp) {
				return 0, &stopRequest{reason: shim.StopFenced}
			}
		}
	}
}

// stopsKnown reports whether the server has answered which attempts to
// stop since the latest lapse, or at was registered after it.
func (a *Agent) stopsKnown(at *attempt) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return at.lapse == a.lapses || a.stopsLapse == a.lapses
}
