package app

import (
	"context"
	"errors"
	"sync"
	"time"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// manager is the process manager's state in this process: which groups
// wait to be advanced, which are being advanced, and the timers of repeats
// waiting for interval_sec or backoff_sec.
//
// How a group moves on, step by step:
//
//  1. A member task changes (a use case of the task app commits it) and the
//     scheduler's hub calls Touch with the task's group id; so do a repeat's
//     timer when it fires, and the reconcile loop for groups the store says
//     are due. Touch only marks the group dirty and wakes a worker: it runs
//     inside the task use case that committed, so it must not block.
//  2. A worker takes a dirty group that no other worker holds (a group is
//     advanced by one worker at a time; a Touch while it runs marks it
//     dirty again, so no change is missed) and runs orch.State.Advance in
//     GroupStore.Mutate: the group is locked, its open members' tasks are
//     read, and what follows (member changes, cancellations, new members,
//     the group's end) is stored in one transaction.
//  3. After the commit the hub hears of every task written (claims wake for
//     new tasks; cancelled ones touch the group again, so the next pass
//     mirrors them), the group's watchers are woken, and a repeat's timer is
//     set to its NextWake.
//
// Replicas advance the groups whose members change on them; the row lock
// serialises replicas on one group. Nothing here is needed for
// correctness after a crash: the reconcile loop (RunManager) finds every
// group whose members moved on without it, and every repeat whose time
// has come, from the store.
type manager struct {
	mu      sync.Mutex
	dirty   map[string]bool
	running map[string]bool
	queue   []string
	wake    chan struct{}
	timers  map[string]*time.Timer
}

func (m *manager) init() {
	m.dirty, m.running, m.timers = map[string]bool{}, map[string]bool{}, map[string]*time.Timer{}
	m.wake = make(chan struct{}, 64)
}

func (m *manager) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Touch asks for group id to be advanced soon. It never blocks.
func (a *App) Touch(id string) {
	m := &a.mgr
	m.mu.Lock()
	if m.dirty[id] {
		m.mu.Unlock()
		return
	}
	m.dirty[id] = true
	if !m.running[id] {
		m.queue = append(m.queue, id)
	}
	m.mu.Unlock()
	m.signal()
}

// next takes the next dirty group for a worker.
func (m *manager) next() (string, bool) {
	m.mu.Lock()
	if len(m.queue) == 0 {
		m.mu.Unlock()
		return "", false
	}
	id := m.queue[0]
	m.queue = m.queue[1:]
	delete(m.dirty, id)
	m.running[id] = true
	more := len(m.queue) > 0
	m.mu.Unlock()
	if more {
		m.signal()
	}
	return id, true
}

// done releases a group a worker advanced; touched meanwhile, it queues
// again.
func (m *manager) done(id string) {
	m.mu.Lock()
	delete(m.running, id)
	again := m.dirty[id]
	if again {
		m.queue = append(m.queue, id)
	}
	m.mu.Unlock()
	if again {
		m.signal()
	}
}

// schedule sets group g's timer to its NextWake, or stops it.
func (m *manager) schedule(a *App, g orch.Group) {
	at := g.NextWake()
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.timers[g.ID]; t != nil {
		t.Stop()
		delete(m.timers, g.ID)
	}
	if at.IsZero() || g.Deleted {
		return
	}
	// At least a few milliseconds: a wake time that has come already
	// (the pass just before found nothing to start) must not spin.
	d := max(at.Sub(a.now()), 5*time.Millisecond)
	id := g.ID
	m.timers[id] = time.AfterFunc(d, func() { a.Touch(id) })
}

// advance is one pass of the process manager over group id (step 2).
func (a *App) advance(ctx context.Context, id string) {
	_, err := a.mutate(ctx, sched.Caller{Tenant: "*", Subject: "scheduler"}, id, Open,
		func(s orch.State, facts map[string]orch.Facts, now time.Time) (orch.State, orch.Decision, error) {
			next, d := s.Advance(now, facts, a.newID)
			return next, d, nil
		})
	switch {
	case err == nil, errors.Is(err, task.ErrNotFound):
		// Gone, or not a group at all: tasks of a plain fan-out carry a
		// group id too.
	case ctx.Err() != nil:
	default:
		// The reconcile loop finds the group again.
		a.log.Warn("task group not advanced", "group", id, "err", err)
	}
}

// RunManager advances groups until ctx is done: Workers workers take
// touched groups, and the replica that holds the lock asks the store every
// Reconcile which groups are due (see manager).
func (a *App) RunManager(ctx context.Context) {
	var wg sync.WaitGroup
	for range a.cfg.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				id, ok := a.mgr.next()
				if !ok {
					select {
					case <-ctx.Done():
					case <-a.mgr.wake:
					}
					continue
				}
				a.advance(ctx, id)
				a.mgr.done(id)
			}
		})
	}
	a.reconcile(ctx)
	wg.Wait()
	a.mgr.mu.Lock()
	for id, t := range a.mgr.timers {
		t.Stop()
		delete(a.mgr.timers, id)
	}
	a.mgr.mu.Unlock()
}

// reconcile touches the groups the store says are due, every Reconcile,
// while this replica holds the lock.
func (a *App) reconcile(ctx context.Context) {
	for ctx.Err() == nil {
		lock, ok, err := a.lock.TryLock(ctx)
		if err != nil || !ok {
			sleep(ctx, a.cfg.Reconcile)
			continue
		}
		tick := time.NewTicker(a.cfg.Reconcile)
		for ctx.Err() == nil {
			if err := lock.Alive(ctx); err != nil {
				break
			}
			ids, err := a.groups.Due(ctx, a.now(), 1000)
			if err != nil && ctx.Err() == nil {
				a.log.Warn("due task groups not read", "err", err)
			}
			for _, id := range ids {
				a.Touch(id)
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		tick.Stop()
		lock.Release()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
