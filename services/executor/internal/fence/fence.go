// Package fence is the arithmetic of fencing that the agent and the
// backends holding tasks on other engines (Kubernetes, Slurm) share
// (docs/executor.md, "Fencing"). The server leases a silent agent's tasks
// elsewhere once it has not heard from the agent for its dead-agent
// timeout (the scheduler's --agent-lost-after). A task the agent holds
// must be stopped before then, whatever made the agent silent; so each
// holder stops its tasks once the fence has passed since the last call
// the server answered was sent:
//
//	contact + lostAfter − Margin − KillGrace
//
// The server recorded that call no earlier than it was sent, so it cannot
// find the agent lost before contact + lostAfter.
package fence

import (
	"fmt"
	"time"
)

const (
	// KillGrace is the most a fenced task is given between the stop and
	// the kill; less when lostAfter is short.
	KillGrace = 2 * time.Second
	// Margin is kept between the kill and the earliest moment the server
	// may lease the task again: for timers, the request that renews a
	// fence, and a busy machine.
	Margin = time.Second
)

// Times returns the fence and the kill grace for a server whose dead-agent
// timeout is lostAfter: with the default 15 s, 12 s and 2 s.
func Times(lostAfter time.Duration) (fence, grace time.Duration) {
	grace = min(KillGrace, lostAfter/6)
	margin := min(Margin, lostAfter/6)
	return lostAfter - grace - margin, grace
}

// Message is the error a fenced attempt is reported with.
func Message(fence time.Duration) string {
	return fmt.Sprintf("fenced: the server had not answered this agent for %s and could lease the task again, so it was stopped", fence.Round(time.Millisecond))
}

// OwnerMessage is the error of a local task stopped because its creator
// did not renew the fence it asked for (docs/api/agent-local.md, "Fenced
// local tasks"): a Slurm backend that handed the task to its node and
// then died, froze or lost the server.
const OwnerMessage = "fenced: the task's creator did not renew its fence in time, so it was stopped"
