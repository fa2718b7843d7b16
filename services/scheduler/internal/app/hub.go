package app

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Hub wakes what waits on tasks: claims long-polling for work, and
// watchers of one task. Across replicas, an adapter carries the work that
// appeared both ways (package adapters/postgres: LISTEN/NOTIFY): on each
// OtherReplicas signal it sends what ForOtherReplicas returns, and it
// hands what the other replicas send to OtherReplicaTasks, or to
// WakeLocal when they could not say which tasks.
//
// A task that became claimable wakes one waiting claim whose agent may
// take it, the one waiting longest, not every claim: with N agents
// waiting, a broadcast costs N claims for one task, N-1 of them empty. A
// woken claim that does not lease the task hands its wake on to the next
// agent that may take it, so a wake given to an agent that cannot take
// the task after all (drained since, the task taken by another replica's
// agent, a row another claim held, a claim filled by other tasks) still
// reaches the agent that can; each agent tries a task's wake once. Work whose taker the hub
// cannot tell (another replica's, tasks waiting for dependencies, scatter
// fan-outs, a completed group member's dependents) wakes every waiting
// claim, as does an undrain or an admission decided elsewhere.
// docs/decisions/0115-a-task-wakes-one-claim.md.
//
// Another replica's task wakes one claim here too. Each replica's agents
// may lease a task without the other replicas' hubs hearing of it, so a
// wake goes on to the next agent only while the database still has the
// task pending (SetPendingCheck): otherwise every agent would try in turn
// a task another replica's agent took.
// docs/decisions/0116-another-replicas-task-wakes-one-claim.md.
type Hub struct {
	mu      sync.Mutex
	waiting []*Waiting // in the order they began to wait
	// wakes are the task wakes under way, by task id: a claim that leases
	// the task ends its wake, whichever claim it was given to.
	wakes    map[string]*taskWake
	watchers map[string]map[chan struct{}]struct{}
	notify   chan struct{}
	// forOthers are the tasks one claim can take that appeared since the
	// other replicas were last signalled, and forOthersAll whether work
	// whose taker the hub cannot tell appeared too (or too many tasks to
	// name): then the other replicas wake every claim.
	forOthers    []domain.Task
	forOthersAll bool
	// pending, if set, returns which of ids are still pending
	// (SetPendingCheck).
	pending func(ctx context.Context, ids []string) ([]string, error)
	// observers see every task after each committed change.
	observers []func(domain.Task)
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{wakes: map[string]*taskWake{}, watchers: map[string]map[chan struct{}]struct{}{}, notify: make(chan struct{}, 1)}
}

// ClaimWaiter is what a waiting claim may take: its caller's tenant ("*"
// any), its agent's machine, address, labels and task types. A drained
// agent takes nothing, so no task's wake is handed to it.
type ClaimWaiter struct {
	AgentID, Tenant, Machine, IP string
	Labels, Types                []string
	Drained                      bool
}

func (c ClaimWaiter) mayTake(t *domain.Task) bool {
	return !c.Drained && (c.Tenant == "*" || c.Tenant == t.TenantID) && t.Matches(c.Machine, c.IP, c.Labels, c.Types)
}

// taskWake is one task's wake, handed from waiting claim to waiting claim
// until a claim leases the task or every agent that may take it has
// tried.
type taskWake struct {
	task  domain.Task
	tried map[string]bool // agent ids
	ended bool            // a claim leased the task, or no agent is left to try it
}

// Waiting is one long-polling claim's place in the hub. Its owner calls
// Claiming before each claim, Claimed after it, and Stop when it returns.
type Waiting struct {
	hub    *Hub
	signal chan struct{} // holds one value once woken
	// Guarded by hub.mu:
	who       ClaimWaiter
	pending   *taskWake // the task wake that woke it and no claim has answered
	answering *taskWake // the task wake the claim under way answers
}

// Wait registers a waiting claim. Register before the first look, so that
// work committed after the look began wakes it.
func (h *Hub) Wait(who ClaimWaiter) *Waiting {
	w := &Waiting{hub: h, who: who, signal: make(chan struct{}, 1)}
	h.mu.Lock()
	h.waiting = append(h.waiting, w)
	h.mu.Unlock()
	return w
}

// Woken receives a value when work the claim may take may have appeared.
func (w *Waiting) Woken() <-chan struct{} { return w.signal }

// Claiming marks the start of a claim, with whether its agent is drained
// now. The claim answers every wake until now: it sees everything
// committed before it began.
func (w *Waiting) Claiming(drained bool) {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	w.who.Drained = drained
	select {
	case <-w.signal:
	default:
	}
	w.answering, w.pending = w.pending, nil
}

// Claimed ends a claim with the tasks it leased. The wakes of those tasks
// end, whichever claims hold them: a claim under way, or one an agent
// made as it came back for more, takes a task it was not woken for, and
// the claim that was woken for it finds nothing and must not hand the
// wake on from agent to agent. When the task of the wake this claim
// answered is not among them (it leased nothing, or other tasks first),
// that wake goes on to the next agent that may take its task: this
// agent's slots may stay full for as long as the others run.
func (w *Waiting) Claimed(leased []domain.Task) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range leased {
		if wk := h.wakes[t.ID]; wk != nil {
			wk.ended = true
			delete(h.wakes, t.ID)
		}
	}
	wk := w.answering
	w.answering = nil
	if wk != nil {
		h.handOn(wk)
	}
}

// Stop ends the wait. A task wake that came while the last claim was
// under way, and that no claim answered, is handed on: the claim may have
// leased other tasks and not that one.
func (w *Waiting) Stop() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.waiting, w); i >= 0 {
		h.waiting = slices.Delete(h.waiting, i, i+1)
	}
	for _, wk := range []*taskWake{w.answering, w.pending} {
		if wk != nil {
			h.handOn(wk)
		}
	}
	w.answering, w.pending = nil, nil
}

// give hands wk to the longest-waiting claim that has no task wake of its
// own yet, whose agent may take the task and has not tried it. With none,
// the wake ends: the claims already woken look after the task was
// committed, and a claim that begins later looks before it waits.
// h.mu is held.
func (h *Hub) give(wk *taskWake) {
	if wk.ended {
		return
	}
	for _, w := range h.waiting {
		if w.pending != nil || wk.tried[w.who.AgentID] || !w.who.mayTake(&wk.task) {
			continue
		}
		wk.tried[w.who.AgentID] = true
		w.pending = wk
		select {
		case w.signal <- struct{}{}:
		default:
		}
		return
	}
	h.end(wk)
}

// end ends wk. h.mu is held.
func (h *Hub) end(wk *taskWake) {
	wk.ended = true
	if h.wakes[wk.task.ID] == wk {
		delete(h.wakes, wk.task.ID)
	}
}

// handOn gives wk, which a claim did not answer with a lease, to the next
// claim, if the database still has its task pending (asked outside h.mu,
// when SetPendingCheck set how): most often a claim finds nothing because
// another replica's agent took the task, and every agent here would
// otherwise try it in turn. If the question fails, the wake goes on (an
// empty claim costs less than a task left to the recheck). h.mu is held.
func (h *Hub) handOn(wk *taskWake) {
	if h.pending == nil || wk.ended {
		h.give(wk)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), pendingCheckTimeout)
		defer cancel()
		pending, err := h.pending(ctx, []string{wk.task.ID})
		h.mu.Lock()
		defer h.mu.Unlock()
		if err == nil && !slices.Contains(pending, wk.task.ID) {
			h.end(wk)
			return
		}
		h.give(wk)
	}()
}

// pendingCheckTimeout bounds the question handOn asks the database.
const pendingCheckTimeout = 2 * time.Second

// SetPendingCheck sets how the hub asks which tasks are still pending
// (the adapter that carries work between replicas sets it). Without it,
// a wake goes on unasked. Call it before serving.
func (h *Hub) SetPendingCheck(pending func(ctx context.Context, ids []string) ([]string, error)) {
	h.mu.Lock()
	h.pending = pending
	h.mu.Unlock()
}

// wakeAll wakes every waiting claim. h.mu is held.
func (h *Hub) wakeAll() {
	for _, w := range h.waiting {
		select {
		case w.signal <- struct{}{}:
		default:
		}
	}
}

// oneTaker reports whether t's wake can go to one claim: t is claimable
// but for its retry time (a claim that finds it not yet due hands the
// wake on, and the recheck finds it later), and its taker is the agent
// the hub can match. Dependencies and scatter fan-outs add rules of the
// claim's own (completed dependencies, one task per machine).
func oneTaker(t *domain.Task) bool {
	return t.Status == domain.StatusPending && !t.Deleted && !t.AwaitingAdmission() &&
		len(t.Spec.DependsOn) == 0 && t.Spec.Mode != domain.ModeScatter
}

// maxForOthers bounds the tasks one signal to the other replicas names
// (a NOTIFY payload holds under 8,000 bytes); with more, they wake every
// claim, which a burst of that many tasks needs anyway.
const maxForOthers = 32

// TasksAppeared wakes claims for tasks just written (created, or pending
// again), and asks for a signal to the other replicas.
func (h *Hub) TasksAppeared(tasks []domain.Task) {
	h.mu.Lock()
	all := false
	for _, t := range tasks {
		if !oneTaker(&t) {
			all = true
			continue
		}
		if !h.forOthersAll && len(h.forOthers) < maxForOthers {
			h.forOthers = append(h.forOthers, t)
		} else {
			h.forOthersAll, h.forOthers = true, nil
		}
		wk := &taskWake{task: t, tried: map[string]bool{}}
		if old := h.wakes[t.ID]; old != nil {
			old.ended = true // the task changed again: one wake for it
		}
		h.wakes[t.ID] = wk
		h.give(wk)
	}
	if all {
		h.wakeAll()
		h.forOthersAll, h.forOthers = true, nil
	}
	h.mu.Unlock()
	h.askOtherReplicas()
}

// WakeClaimers wakes every local waiting claim and asks for a signal to
// the other replicas: work appeared whose takers the hub cannot tell.
func (h *Hub) WakeClaimers() {
	h.mu.Lock()
	h.wakeAll()
	h.forOthersAll, h.forOthers = true, nil
	h.mu.Unlock()
	h.askOtherReplicas()
}

// ForOtherReplicas returns what to signal to the other replicas after an
// OtherReplicas signal, and starts collecting anew: the tasks that
// appeared since the last call, each to wake one claim there, or all
// when they should wake every claim.
func (h *Hub) ForOtherReplicas() (tasks []domain.Task, all bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tasks, all = h.forOthers, h.forOthersAll
	h.forOthers, h.forOthersAll = nil, false
	return tasks, all
}

// OtherReplicaTasks wakes one claim for each task that became pending on
// another replica, as TasksAppeared does for this replica's (the tasks
// need their id, tenant and what Task.Matches reads). A task with a wake
// already under way here gets no second one.
func (h *Hub) OtherReplicaTasks(tasks []domain.Task) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range tasks {
		if h.wakes[t.ID] != nil {
			continue
		}
		wk := &taskWake{task: t, tried: map[string]bool{}}
		h.wakes[t.ID] = wk
		h.give(wk)
	}
}

func (h *Hub) askOtherReplicas() {
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

// OtherReplicas receives a value when the other replicas should hear of
// work (ForOtherReplicas says what). Signals that arrive while one is
// pending are merged into it.
func (h *Hub) OtherReplicas() <-chan struct{} { return h.notify }

// WakeLocal wakes this process's waiting claims (another replica's work
// appeared, and its signal does not say which tasks).
func (h *Hub) WakeLocal() {
	h.mu.Lock()
	h.wakeAll()
	h.mu.Unlock()
}

// Observe calls fn with every task after each change committed through
// this process's use cases (an in-process component with rules of its own
// about tasks, such as the pipeline's process manager). fn runs in the
// committing goroutine: it must not block. Call it before serving.
func (h *Hub) Observe(fn func(domain.Task)) {
	h.mu.Lock()
	h.observers = append(h.observers, fn)
	h.mu.Unlock()
}

// Changed tells watchers and observers of t that it changed, and wakes
// claims when t is pending (one claim when the hub can tell its taker), or
// completed as a member of a group: tasks waiting for it (depends_on) may
// have become claimable.
func (h *Hub) Changed(t domain.Task) {
	h.mu.Lock()
	for ch := range h.watchers[t.ID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	observers := h.observers
	h.mu.Unlock()
	for _, f := range observers {
		f(t)
	}
	switch {
	case t.Status == domain.StatusPending:
		h.TasksAppeared([]domain.Task{t})
	case t.Status == domain.StatusCompleted && t.Spec.GroupID != "":
		h.WakeClaimers()
	}
}

// Watch subscribes to changes of one task until cancel is called.
func (h *Hub) Watch(id string) (changes <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.watchers[id] == nil {
		h.watchers[id] = map[chan struct{}]struct{}{}
	}
	h.watchers[id][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.watchers[id], ch)
		if len(h.watchers[id]) == 0 {
			delete(h.watchers, id)
		}
		h.mu.Unlock()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
