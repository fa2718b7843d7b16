package chaos

import (
	"context"
	"fmt"
	"time"
)

// The fence that keeps a task from running on two agents at once
// (docs/executor.md, "Fencing") is made of timers: the shim's, which
// stops the task, and the server's, which finds the agent lost. It holds
// as long as the shim's timer fires within the margin the agent keeps
// between them (a sixth of --agent-lost-after here, 667 ms). A machine so
// busy that no process runs for longer than that can let a task outlive
// its fence, and the process overlaps invariant then fails for a cause
// that is the machine's, not the code's. The stall monitor makes that
// visible: a goroutine of the driver that sleeps stallTick at a time and
// records how much later than asked it woke. It is a sample, not a proof
// (the driver is one process of many), but a stall it saw is a stall the
// deployment's processes lived through too.

// stallTick is the monitor's sleep; stallReported the lateness from which
// a wake-up counts as a stall.
const (
	stallTick     = 50 * time.Millisecond
	stallReported = 500 * time.Millisecond
)

// stall is a wake-up of the monitor late by at least stallReported.
type stall struct {
	at   time.Time // when the monitor woke
	late time.Duration
}

// stallLog gathers the stalls of a run.
type stallLog struct {
	stalls []stall
}

// observe records a wake-up at woke of a sleep due at due.
func (l *stallLog) observe(due, woke time.Time) {
	if late := woke.Sub(due); late >= stallReported {
		l.stalls = append(l.stalls, stall{at: woke, late: late})
	}
}

// watch observes its own sleeps until ctx ends; the log is the caller's
// to read only after watch returned.
func (l *stallLog) watch(ctx context.Context) {
	t := time.NewTimer(stallTick)
	defer t.Stop()
	due := time.Now().Add(stallTick)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Now, not the timer's time: a goroutine waiting for a thread
			// is part of the stall.
			l.observe(due, time.Now())
			due = time.Now().Add(stallTick)
			t.Reset(stallTick)
		}
	}
}

// summary is the report's line about the stalls: how many, and the
// longest with its time.
func (l *stallLog) summary() string {
	if len(l.stalls) == 0 {
		return fmt.Sprintf("no stall of %s or more seen", stallReported)
	}
	longest := l.stalls[0]
	for _, s := range l.stalls[1:] {
		if s.late > longest.late {
			longest = s
		}
	}
	return fmt.Sprintf("%d stalls of %s or more seen; the longest %s, ending at %s",
		len(l.stalls), stallReported, longest.late.Round(time.Millisecond), longest.at.UTC().Format("15:04:05.000"))
}
