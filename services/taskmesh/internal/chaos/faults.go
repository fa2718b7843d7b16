package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"sync"
	"syscall"
	"time"
)

// Fault kinds.
const (
	faultKill        = "kill"         // SIGKILL one process, start it again
	faultPostgres    = "pg-immediate" // pg_ctl stop -m immediate, start again
	faultBrokerStall = "broker-stall" // SIGSTOP the broker, SIGCONT later
	faultAgentStop   = "agent-stop"   // SIGSTOP an agent past its heartbeat timeout
	faultAgentCut    = "agent-cut"    // the agent's proxy drops and refuses connections, then heals
)

// window is one fault's outage: from the fault to the moment the process
// served again (or was continued, or the link healed).
type window struct {
	kind, target string
	start, end   time.Time
	// api says whether the front doors may answer 503 because of it; an
	// agent's fault does not touch them.
	api bool
	err error // the driver failed to inject or heal it
}

// driver injects faults on a schedule drawn from its seed: the same seed
// gives the same sequence of faults, targets, durations and gaps.
type driver struct {
	d     *deployment
	rnd   *rand.Rand
	short bool // shorter stalls, for the test's short run
	out   io.Writer

	mu      sync.Mutex
	windows []window
}

// killable are the processes a kill fault picks from.
func (f *driver) killable() []*proc { return f.d.procs }

// run injects faults until ctx ends; the fault in progress is healed
// before run returns.
func (f *driver) run(ctx context.Context) {
	for {
		gap := time.Duration(3+f.rnd.Intn(6)) * time.Second
		if f.short {
			gap = time.Duration(2+f.rnd.Intn(4)) * time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		w := f.inject(ctx)
		f.mu.Lock()
		f.windows = append(f.windows, w)
		f.mu.Unlock()
		status := "healed"
		if w.err != nil {
			status = "FAILED: " + w.err.Error()
		}
		fmt.Fprintf(f.out, "fault %-13s %-12s %6.1fs  %s\n", w.kind, w.target, w.end.Sub(w.start).Seconds(), status)
	}
}

// inject draws one fault and carries it out, healing included. It does
// not watch ctx once the fault is injected: a fault is always healed.
func (f *driver) inject(ctx context.Context) window {
	heal := context.WithoutCancel(ctx)
	switch n := f.rnd.Intn(100); {
	case n < 50:
		procs := f.killable()
		p := procs[f.rnd.Intn(len(procs))]
		w := window{kind: faultKill, target: p.name, start: time.Now(), api: p.kind != kindAgent}
		p.kill()
		w.err = p.start(heal)
		w.end = time.Now()
		return w
	case n < 62:
		w := window{kind: faultPostgres, target: "postgres", start: time.Now(), api: true}
		w.err = f.d.restartPostgres(heal)
		w.end = time.Now()
		return w
	case n < 74:
		stall := time.Duration(10+f.rnd.Intn(21)) * time.Second
		if f.short {
			stall = time.Duration(5+f.rnd.Intn(6)) * time.Second
		}
		return f.pause(f.d.ofKind(kindBroker)[0], faultBrokerStall, stall, true)
	case n < 87:
		a := f.d.agents[f.rnd.Intn(len(f.d.agents))]
		stall := agentLostAfter + time.Duration(1+f.rnd.Intn(4))*time.Second
		return f.pause(a, faultAgentStop, stall, false)
	default:
		i := f.rnd.Intn(len(f.d.proxies))
		cut := time.Duration(3+f.rnd.Intn(8)) * time.Second
		w := window{kind: faultAgentCut, target: f.d.agents[i].name, start: time.Now()}
		f.d.proxies[i].setCut(true)
		time.Sleep(cut)
		f.d.proxies[i].setCut(false)
		w.end = time.Now()
		return w
	}
}

// pause SIGSTOPs p for d, then SIGCONTs it.
func (f *driver) pause(p *proc, kind string, d time.Duration, api bool) window {
	w := window{kind: kind, target: p.name, start: time.Now(), api: api}
	if w.err = p.signal(syscall.SIGSTOP); w.err == nil {
		time.Sleep(d)
		w.err = p.signal(syscall.SIGCONT)
	}
	w.end = time.Now()
	return w
}

func (f *driver) snapshot() []window {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]window(nil), f.windows...)
}
