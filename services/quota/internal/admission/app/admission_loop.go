package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
)

// LoopStore is where the admission loop runs (package adapters/postgres):
// the lock that makes one replica's loop the active one, and the reads
// and transactions of its sessions.
type LoopStore interface {
	// Lead runs session each time this replica takes the loop's lock,
	// until ctx is done; the sessions of every replica's loop never
	// overlap. A standby asks for the lock again every retry, and a
	// session that ended in an error is followed by a new one after
	// retry. It returns nil when ctx is done, or an error that no retry
	// would mend (the lock cannot be asked for at all).
	Lead(ctx context.Context, retry time.Duration, log *slog.Logger, session func(context.Context, LoopSession) error) error
}

// LoopSession is a session's hold on the database: its reads and
// transactions run where the lock is held, so that none of them outlives
// the lock unnoticed.
type LoopSession interface {
	// Alive fails once the lock is no longer held (its connection
	// broke): the session must end.
	Alive(ctx context.Context) error
	// Waiting reads, without a transaction or a lock, the topology's
	// generation and whether facts after the sequence number after wait
	// to be consumed: what a cycle would find to do besides the core's own
	// decisions.
	//
	// after is the last fact the loop consumed (0 before its first). Every
	// fact at or below it is consumed: the task-topic projection, a single
	// writer, commits facts in their sequence order. Reading above it, an
	// index scan starts past the consumed facts' dead rows, which would
	// otherwise be scanned by every cycle until vacuum removes them.
	Waiting(ctx context.Context, after int64) (generation int64, facts bool, err error)
	// Rebuild runs fn in one transaction, which commits when fn returns
	// nil; fn's error is returned as is.
	Rebuild(ctx context.Context, fn func(LoopTx) error) error
	// Cycle runs fn in one transaction of two round trips: BEGIN goes out
	// with StartCycle's reads and COMMIT with SaveCycle's writes, so
	// SaveCycle is the last call fn makes. What SaveCycle wrote commits
	// when fn returns nil, nothing does otherwise; fn's error is returned
	// as is.
	Cycle(ctx context.Context, fn func(LoopTx) error) error
}

// LoopTx is one transaction of a session.
type LoopTx interface {
	// DefinitionsGeneration reads the topology's generation and holds a
	// share lock on it until the transaction ends, so no definition
	// changes during the cycle.
	DefinitionsGeneration() (int64, error)
	LoadDefinitions() (Definitions, error)
	// LoadWorkloads returns the recorded workloads that are not finished.
	LoadWorkloads() ([]WorkloadRecord, error)
	// StartCycle reads, in one round trip, what a cycle starts from: the
	// topology's generation, holding the share lock DefinitionsGeneration
	// holds; up to limit pending facts after after (LoopSession.Waiting)
	// in arrival order; and of the facts handed to the loop directly
	// (Loop.Queue, Loop.Finish) those newer than the version recorded for
	// their task, in their order, recording their versions with the ones
	// the task-topic projection records (the others were seen before and
	// must not be applied again). Its version write conflicts with the
	// projection's (row locks), so a fact is seen once. Besides, the
	// finished workloads of every task these facts (and the direct ones
	// not applied) name.
	StartCycle(after int64, limit int, direct []Fact) (CycleStart, error)
	// SaveCycle appends events, upserts changed workloads, deletes removed
	// ones and the consumed facts (StartCycle's, in their order).
	SaveCycle(events []eventstore.Event, changed []*WorkloadRecord, removed []string, consumed []Fact) error
}

// CycleStart is what a cycle starts from (LoopStore.StartCycle).
type CycleStart struct {
	Generation int64
	// Facts wait in arrival order; Direct are the direct facts not seen
	// before.
	Facts, Direct []Fact
	// Finished are recorded finished workloads of the facts' tasks (of
	// some of them, or none).
	Finished []WorkloadRecord
}

// LoopConfig tunes the admission loop.
type LoopConfig struct {
	// Tick is how often the loop looks for work without being woken
	// (facts from another instance, timers of the core); default 200ms.
	Tick time.Duration
	// MaxFacts bounds the facts consumed per cycle (default 2000);
	// MaxDecisions the decisions made per cycle (default 2000).
	MaxFacts, MaxDecisions int
	// AfterCommit runs after each cycle that recorded events (wakes the
	// outbox relay).
	AfterCommit func()
	// Released runs after a cycle in which admitted work left a closing
	// queue (Definitions.Closing), and when a session starts with closing
	// queues: one may hold no admitted work any more, and goes then
	// (App.QueueReleased).
	Released func()
}

// Loop is the admission loop. Exactly one instance is active: it holds
// the loop's lock (LoopStore.Lead), and standbys wait for it.
//
// A session, step by step:
//
//  1. Take the lock, then rebuild the core from the recorded definitions
//     and live workloads (admitted and evicting ones with their admission).
//  2. Each cycle, in one transaction on the lock's connection: share-lock
//     the definitions generation and reconfigure the core if it moved;
//     consume the pending task facts (new stays, finished work) into the
//     core; ask the core for decisions and apply them; record every
//     resulting event and workload row; delete the consumed facts; commit.
//  3. Wait for a wake-up (new facts, a definition change) or the tick, and
//     check the lock is still held.
//
// A cycle with nothing to do opens no transaction: without offers, facts
// waiting, a definition change or a decision the core would make, it ends
// after one read (LoopSession.Waiting). Such cycles are most of them (the
// one that follows every deciding cycle, the wake-ups for facts another
// cycle consumed), and a transaction that share-locks the generation
// row takes a transaction id, so its commit waits for a WAL flush; an
// offer arriving meanwhile would wait for it.
//
// The core is changed before the commit; when a cycle fails the session
// ends and the next one rebuilds the core from what was committed, so the
// core never holds an unrecorded decision for long, and a decision is
// never published without being recorded.
type Loop struct {
	store   LoopStore
	newCore NewCore
	now     func() time.Time
	log     *slog.Logger
	cfg     LoopConfig
	wake    chan struct{}

	// mu guards the session state below against the reads (Explain,
	// usage) of other goroutines.
	mu   sync.Mutex
	core Core // nil outside a session
	gen  int64
	// work holds the live workloads (pending, admitted, evicting). A
	// finished one is kept only during the cycle that finishes it or
	// reads it back for a fact about its task (StartCycle); the rest of
	// the history stays in the database, so neither memory nor the
	// loop's work grows with it.
	work    map[string]*WorkloadRecord
	outside map[string]bool // pending workloads the core does not hold (unknown queue)
	// factsAfter is the last fact consumed in this session (LoopSession.Waiting).
	factsAfter int64
	queues     []string // the ClusterQueues of the core's topology (metrics)
	// closing are the core's topology's closing queues (Definitions.Closing).
	closing map[string]string

	// offersMu guards the workloads handed to the loop directly: taken
	// (new) by the next cycle, then waiting (taken) for a decision until
	// the loop is idle.
	offersMu sync.Mutex
	active   bool // a session holds the lock and takes offers
	offers   []*offer
	taken    []*offer
}

// offer is one workload handed to the loop directly (Queue), and where
// its answer goes.
type offer struct {
	fact Fact
	// sync offers carry no fact: the cycle that takes one has read the
	// definitions committed before it was made (Loop.Sync).
	sync bool
	done chan queued
}

type queued struct {
	res QueueResult
	// admitted are the admissions of the cycle that applied a finish
	// fact (Finish).
	admitted []Admission
	err      error
}

// QueueResult is what Queue answers: whether the workload's stay was
// admitted, with the decision as WorkloadAdmitted records it.
type QueueResult struct {
	Admitted bool
	Admission
}

// Admission is one admission decision as WorkloadAdmitted records it.
type Admission struct {
	TaskID       string
	ClusterQueue string
	Flavors      map[string]string
	// TaskVersion is the version of the task event that began the stay
	// (the decision's epoch).
	TaskVersion int64
}

// ErrNotActive: this instance's admission loop is a standby (or between
// sessions); the workload reaches the active one through the task topic.
var ErrNotActive = errors.New("the admission loop is not active in this instance")

// NewLoop returns a loop; Run starts it.
func NewLoop(store LoopStore, newCore NewCore, now func() time.Time, log *slog.Logger, cfg LoopConfig) *Loop {
	if cfg.Tick <= 0 {
		cfg.Tick = 200 * time.Millisecond
	}
	if cfg.MaxFacts <= 0 {
		cfg.MaxFacts = 2000
	}
	if cfg.MaxDecisions <= 0 {
		cfg.MaxDecisions = 2000
	}
	return &Loop{store: store, newCore: newCore, now: now, log: log, cfg: cfg, wake: make(chan struct{}, 1)}
}

// Wake makes the loop run a cycle now instead of at its next tick.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Queue hands the loop the queue fact of a task the scheduler has just
// stored, so a workload that fits is admitted in the next cycle instead of
// after its TaskSubmitted went through the task topic, and answers once
// that is decided: admitted (the decision committed, and published as
// WorkloadAdmitted like any other), or not admitted when the loop is idle
// without having admitted it (it waits in its queue as usual, and its
// decision comes through the quota topic). The fact is the same the
// projection makes of the task's event and is applied once, whichever
// comes first (StartCycle). Nothing here weakens admission: the loop alone
// decides, in its cycle, from its recorded state. ErrNotActive when no
// session runs here; a cycle's error is returned and nothing of the fact
// is recorded (the task topic still brings it).
func (l *Loop) Queue(ctx context.Context, f Fact) (QueueResult, error) {
	o := &offer{fact: f, done: make(chan queued, 1)}
	l.offersMu.Lock()
	if !l.active {
		l.offersMu.Unlock()
		return QueueResult{}, ErrNotActive
	}
	l.offers = append(l.offers, o)
	l.offersMu.Unlock()
	l.Wake()
	select {
	case q := <-o.done:
		return q.res, q.err
	case <-ctx.Done():
		return QueueResult{}, ctx.Err()
	}
}

// Finish hands the loop the end of a task's workload (a finish fact, as
// the projection makes of TaskSucceeded, TaskFailed or TaskCanceled) right
// after the scheduler committed it, so the quota it held is free for the
// next cycle instead of after the event went through the task topic. It
// answers, once that cycle committed, with the admissions the cycle
// decided (those the freed quota allowed among them); their
// WorkloadAdmitted are published as always. Applied once, like Queue's
// stays; the same errors.
func (l *Loop) Finish(ctx context.Context, f Fact) ([]Admission, error) {
	o := &offer{fact: f, done: make(chan queued, 1)}
	l.offersMu.Lock()
	if !l.active {
		l.offersMu.Unlock()
		return nil, ErrNotActive
	}
	l.offers = append(l.offers, o)
	l.offersMu.Unlock()
	l.Wake()
	select {
	case q := <-o.done:
		return q.admitted, q.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Sync waits until a cycle has started after the call, so the core runs
// on every definition committed before it: a definition write answers
// with the usage of the topology it wrote (docs/api/quota.md#queue-admission)
// rather than the previous one. ErrNotActive when no session runs here.
func (l *Loop) Sync(ctx context.Context) error {
	o := &offer{sync: true, done: make(chan queued, 1)}
	l.offersMu.Lock()
	if !l.active {
		l.offersMu.Unlock()
		return ErrNotActive
	}
	l.offers = append(l.offers, o)
	l.offersMu.Unlock()
	l.Wake()
	select {
	case q := <-o.done:
		return q.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// takeOffers moves the new offers to the taken ones and returns them.
func (l *Loop) takeOffers() []*offer {
	l.offersMu.Lock()
	defer l.offersMu.Unlock()
	out := l.offers
	l.offers = nil
	l.taken = append(l.taken, out...)
	return out
}

// answerOffers answers, after a cycle that took offers (with l.mu
// held): finish offers with the cycle's admissions; stays whose workload
// is admitted at their version; and every other one when the cycle failed
// with err or the loop is idle (final).
func (l *Loop) answerOffers(admitted []Admission, final bool, err error) {
	l.offersMu.Lock()
	defer l.offersMu.Unlock()
	keep := l.taken[:0]
	for _, o := range l.taken {
		if o.sync || o.fact.Kind == FactFinish {
			// Taken by this cycle: every cycle answers its finishes and
			// syncs.
			o.done <- queued{admitted: admitted, err: err}
			continue
		}
		var res QueueResult
		if err == nil {
			if r := l.work[o.fact.TaskID]; r != nil && r.TaskVersion == o.fact.TaskVersion &&
				(r.State == StateAdmitted || r.State == StateEvicting) {
				res = QueueResult{Admitted: true, Admission: Admission{TaskID: r.ID, ClusterQueue: r.ClusterQueue,
					Flavors: r.Flavors, TaskVersion: r.TaskVersion}}
			}
		}
		if res.Admitted || final || err != nil {
			o.done <- queued{res: res, err: err}
			continue
		}
		keep = append(keep, o)
	}
	clear(l.taken[len(keep):])
	l.taken = keep
}

// setActive opens or closes the loop to offers; closing answers the
// waiting ones with ErrNotActive.
func (l *Loop) setActive(on bool) {
	l.offersMu.Lock()
	defer l.offersMu.Unlock()
	l.active = on
	if on {
		return
	}
	for _, o := range append(l.taken, l.offers...) {
		o.done <- queued{err: ErrNotActive}
	}
	l.taken, l.offers = nil, nil
}

// Run runs sessions until ctx is done, as the leader among the loops of
// every replica (LoopStore.Lead): a standby asks for the lock again each
// tick, and a session that ended in an error is followed by a new one
// after a tick.
func (l *Loop) Run(ctx context.Context) error {
	defer l.observe()()
	return l.store.Lead(ctx, l.cfg.Tick, l.log, l.session)
}

func (l *Loop) session(ctx context.Context, db LoopSession) error {
	defer func() {
		l.mu.Lock()
		l.core, l.work, l.outside = nil, nil, nil
		l.mu.Unlock()
	}()
	if err := l.rebuild(ctx, db); err != nil {
		return err
	}
	// A closing queue whose last admitted work ended while no session ran
	// goes now rather than at the next WorkGroup sync.
	if len(l.closing) > 0 && l.cfg.Released != nil {
		l.cfg.Released()
	}
	l.setActive(true)
	defer l.setActive(false)
	tick := time.NewTicker(l.cfg.Tick)
	defer tick.Stop()
	for {
		more, err := l.cycle(ctx, db)
		if err != nil {
			return err
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.wake:
		case <-tick.C:
			if err := db.Alive(ctx); err != nil {
				return err
			}
		}
	}
}

// rebuild loads the recorded state into a new core.
func (l *Loop) rebuild(ctx context.Context, db LoopSession) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return db.Rebuild(ctx, func(tx LoopTx) error {
		gen, err := tx.DefinitionsGeneration()
		if err != nil {
			return err
		}
		defs, err := tx.LoadDefinitions()
		if err != nil {
			return err
		}
		// Recorded admissions stand even where quota shrank since they
		// were decided: admit them under unbounded quotas, then move to
		// the real ones (Reconfigure keeps usage), then queue the rest.
		core, err := l.newCore(unbounded(defs))
		if err != nil {
			return fmt.Errorf("admission loop: recorded definitions: %w", err)
		}
		recs, err := tx.LoadWorkloads()
		if err != nil {
			return err
		}
		l.core, l.gen, l.work, l.outside = core, gen, make(map[string]*WorkloadRecord, len(recs)), map[string]bool{}
		l.factsAfter = 0
		for i := range recs {
			r := &recs[i]
			l.work[r.ID] = r
			if r.State == StateAdmitted || r.State == StateEvicting {
				l.restore(r)
			}
		}
		if err := core.Reconfigure(defs); err != nil {
			return fmt.Errorf("admission loop: recorded definitions: %w", err)
		}
		l.queues, l.closing = queueNames(defs), defs.Closing
		for i := range recs {
			if r := &recs[i]; r.State == StatePending {
				l.restore(r)
			}
		}
		for i := range recs {
			r := &recs[i]
			if r.State != StateEvicting || l.outside[r.ID] {
				continue
			}
			if err := l.core.Preempt(r.ID, r.Preemptor); err != nil {
				// The preemptor is gone; the victim still stops and is
				// requeued by the scheduler, which ends its stay.
				l.log.Info("admission loop: restore eviction", "task_id", r.ID, "err", err)
			}
		}
		return nil
	})
}

// unbounded is defs with every quota unlimited, to restore recorded
// admissions whatever the current quotas are.
func unbounded(defs Definitions) Definitions {
	out := Definitions{ClusterQueues: make(map[string]*quotav1.ClusterQueueSpec, len(defs.ClusterQueues)),
		Cohorts: make(map[string]*quotav1.CohortSpec, len(defs.Cohorts))}
	open := func(groups []*quotav1.ResourceGroup) {
		for _, g := range groups {
			for _, f := range g.GetFlavors() {
				for _, r := range f.GetResources() {
					r.NominalQuota, r.BorrowingLimit, r.LendingLimit = unboundedQuota, nil, nil
				}
			}
		}
	}
	for name, spec := range defs.ClusterQueues {
		c := proto.CloneOf(spec)
		open(c.GetResourceGroups())
		out.ClusterQueues[name] = c
	}
	for name, spec := range defs.Cohorts {
		c := proto.CloneOf(spec)
		open(c.GetResourceGroups())
		out.Cohorts[name] = c
	}
	return out
}

// unboundedQuota is more than anything can request, within the core's
// bounds (10^15 units).
const unboundedQuota = "1P"

// restore puts a recorded workload back into the core: pending, or
// admitted with its recorded flavors.
func (l *Loop) restore(r *WorkloadRecord) {
	if err := l.core.Enqueue(r.Workload); err != nil {
		l.outside[r.ID] = true
		return
	}
	if r.State == StatePending {
		return
	}
	if err := l.core.Admit(r.ID, r.Flavors); err != nil {
		l.log.Warn("admission loop: restore admission", "task_id", r.ID, "err", err)
	}
}

// cycleOut collects what one cycle records.
type cycleOut struct {
	// decided counts the decisions applied, by (ClusterQueue, kind).
	decided map[[2]string]int64
	// admitted lists the admissions, for the finish offers' answers.
	admitted []Admission
	events   []eventstore.Event
	changed  map[string]*WorkloadRecord
	removed  []string
	// released: admitted work left a closing queue (LoopConfig.Released).
	released bool
	err      error
}

func (o *cycleOut) record(r *WorkloadRecord, at time.Time, ev any) {
	if o.err != nil {
		return
	}
	r.Version++
	e, err := newEvent(AggregateWorkload, r.ID, r.Version, r.TenantID, "admission", "", at, ev)
	if err != nil {
		o.err = err
		return
	}
	o.events = append(o.events, e)
	o.changed[r.ID] = r
}

// cycle runs one transaction; more reports that another cycle should
// follow at once (facts are left, or decisions were made).
func (l *Loop) cycle(ctx context.Context, db LoopSession) (more bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var (
		recorded bool
		out      *cycleOut
		// touched are the workloads this cycle read back or changed:
		// those finished are forgotten once it ends (Loop.work).
		touched []string
		// consumed are the facts the cycle applied, once it saved them.
		consumed []Fact
	)
	offers := l.takeOffers()
	// Offers are answered after the commit: finishes and admitted stays
	// at once, the other stays when a cycle leaves nothing more to do
	// (the core may admit them in a following one).
	defer func() {
		var admitted []Admission
		if out != nil {
			admitted = out.admitted
		}
		l.answerOffers(admitted, !more, err)
	}()
	if len(offers) == 0 {
		quiet, qerr := l.quiet(ctx, db)
		if qerr != nil {
			err = fmt.Errorf("admission cycle: %w", qerr)
			return false, err
		}
		if quiet {
			return false, nil
		}
	}
	// Two round trips: BEGIN goes out with StartCycle's reads and COMMIT
	// with SaveCycle's writes (LoopSession.Cycle).
	err = db.Cycle(ctx, func(tx LoopTx) error {
		start, err := tx.StartCycle(l.factsAfter, l.cfg.MaxFacts, offerFacts(offers))
		if err != nil {
			return err
		}
		for i := range start.Finished {
			r := &start.Finished[i]
			if l.work[r.ID] == nil {
				l.work[r.ID] = r
			}
			touched = append(touched, r.ID)
		}
		now := l.now()
		if start.Generation != l.gen {
			defs, err := tx.LoadDefinitions()
			if err != nil {
				return err
			}
			l.reconfigure(defs)
			l.gen = start.Generation
		}
		facts, direct := start.Facts, start.Direct
		out = &cycleOut{changed: map[string]*WorkloadRecord{}, decided: map[[2]string]int64{}}
		for _, f := range facts {
			l.applyFact(f, now, out)
		}
		// After the recorded facts, which came first.
		for _, f := range direct {
			l.applyFact(f, now, out)
		}
		beforeDecisions := len(out.events)
		for _, d := range l.core.Schedule(now, l.cfg.MaxDecisions) {
			l.applyDecision(d, now, out)
		}
		if out.err != nil {
			return out.err
		}
		// The core may decide more once these decisions are applied (its
		// contract: call again while decisions come). Only applied ones
		// count, so a refused decision cannot spin the loop.
		more = len(facts) == l.cfg.MaxFacts || len(out.events) > beforeDecisions
		if len(facts) == 0 && len(direct) == 0 && len(out.events) == 0 {
			return nil
		}
		changed := make([]*WorkloadRecord, 0, len(out.changed))
		for _, r := range out.changed {
			if l.work[r.ID] == r {
				changed = append(changed, r)
			}
		}
		recorded = len(out.events) > 0
		if err := tx.SaveCycle(out.events, changed, out.removed, facts); err != nil {
			return err
		}
		consumed = facts
		return nil
	})
	if out != nil {
		for id := range out.changed {
			touched = append(touched, id)
		}
	}
	l.forgetFinished(touched)
	if err != nil {
		return false, fmt.Errorf("admission cycle: %w", err)
	}
	if len(consumed) > 0 {
		l.factsAfter = consumed[len(consumed)-1].Seq
	}
	if recorded {
		countDecisions(ctx, out.decided)
		if l.cfg.AfterCommit != nil {
			l.cfg.AfterCommit()
		}
		if out.released && l.cfg.Released != nil {
			l.cfg.Released()
		}
	}
	return more, nil
}

// forgetFinished drops the finished workloads among ids from l.work. A
// cycle that failed ends the session, whose next one rebuilds l.work from
// what was committed, so forgetting what it did not commit loses nothing.
func (l *Loop) forgetFinished(ids []string) {
	for _, id := range ids {
		if r := l.work[id]; r != nil && r.State == StateFinished {
			delete(l.work, id)
		}
	}
}

// quiet reports whether a cycle would find nothing to do: no facts wait,
// the topology is the core's, and the core decides nothing now (Schedule
// changes nothing). Called with l.mu held.
func (l *Loop) quiet(ctx context.Context, db LoopSession) (bool, error) {
	gen, facts, err := db.Waiting(ctx, l.factsAfter)
	if err != nil {
		return false, err
	}
	return !facts && gen == l.gen && len(l.core.Schedule(l.now(), 1)) == 0, nil
}

// offerFacts are the facts of offers.
func offerFacts(offers []*offer) []Fact {
	facts := make([]Fact, 0, len(offers))
	for _, o := range offers {
		if !o.sync {
			facts = append(facts, o.fact)
		}
	}
	return facts
}

// reconfigure moves the core to new definitions. Pending workloads of
// queues that disappear leave the core (they wait outside it until their
// queue is defined again); workloads waiting for a queue that now exists
// enter it.
func (l *Loop) reconfigure(defs Definitions) {
	for id, r := range l.work {
		if r.State == StatePending && !l.outside[id] {
			if _, ok := defs.ClusterQueues[r.ClusterQueue]; !ok {
				if err := l.core.Remove(id); err == nil {
					l.outside[id] = true
				}
			}
		}
	}
	if err := l.core.Reconfigure(defs); err != nil {
		// Writers validate before recording, so this is a definition
		// the core refuses in the current state (e.g. a queue with
		// admitted work): keep the previous topology.
		l.log.Error("admission loop: reconfigure refused; keeping the previous topology", "err", err)
	} else {
		l.queues, l.closing = queueNames(defs), defs.Closing
	}
	for id := range l.outside {
		r := l.work[id]
		if err := l.core.Enqueue(r.Workload); err == nil {
			delete(l.outside, id)
			r.Reason = ""
		}
	}
}

// applyFact feeds one task lifecycle fact to the core and records its
// events.
func (l *Loop) applyFact(f Fact, now time.Time, out *cycleOut) {
	r := l.work[f.TaskID]
	switch f.Kind {
	case FactQueue, FactRequeue:
		if f.Kind == FactRequeue && r == nil {
			return // never had a queue: nothing to requeue
		}
		if r != nil && f.TaskVersion <= r.TaskVersion {
			// This stay, or an earlier one, began already: the same fact
			// came both directly (Queue) and through the task topic.
			return
		}
		next := &WorkloadRecord{}
		if r != nil {
			*next = *r
			l.leave(r, "requeued: "+f.Reason, now, out)
		}
		if f.Kind == FactQueue {
			next.ID, next.TenantID, next.ClusterQueue = f.TaskID, f.TenantID, f.ClusterQueue
			next.Priority, next.Requests = f.Priority, f.Requests
			if !f.Created.IsZero() || next.Created.IsZero() {
				next.Created = f.Created
			}
		}
		next.TaskVersion, next.State, next.Flavors, next.Borrowing = f.TaskVersion, StatePending, nil, false
		next.AdmittedAt, next.Preemptor, next.Reason = time.Time{}, "", ""
		if r != nil {
			next.Version = r.Version
		}
		l.work[f.TaskID] = next
		if err := l.core.Enqueue(next.Workload); err != nil {
			l.outside[next.ID] = true
			next.Reason = err.Error()
		}
		out.record(next, now, &quotav1.WorkloadQueued{TaskId: next.ID, ClusterQueue: next.ClusterQueue,
			Priority: int32(next.Priority), CreatedAt: timestamppb.New(next.Created), Requests: next.Requests,
			TaskVersion: next.TaskVersion})
	case FactFinish, FactDelete:
		if r == nil {
			return
		}
		if r.State != StateFinished {
			l.noteRelease(r, out)
			l.leaveCore(r)
			r.State, r.Reason, r.Flavors, r.Borrowing, r.Preemptor = StateFinished, f.Reason, nil, false, ""
			out.record(r, now, &quotav1.WorkloadFinished{TaskId: r.ID, Reason: f.Reason})
		}
		if f.Kind == FactDelete {
			delete(l.work, r.ID)
			delete(out.changed, r.ID)
			out.removed = append(out.removed, r.ID)
		}
	}
}

// leave takes r out of the core before a new stay; an admitted workload
// records that it no longer holds quota.
func (l *Loop) leave(r *WorkloadRecord, reason string, now time.Time, out *cycleOut) {
	held := r.State == StateAdmitted || r.State == StateEvicting
	l.noteRelease(r, out)
	l.leaveCore(r)
	if held {
		out.record(r, now, &quotav1.WorkloadEvicted{TaskId: r.ID, Reason: reason})
	}
}

// noteRelease notes in out when r, about to leave the core, holds quota in
// a closing queue.
func (l *Loop) noteRelease(r *WorkloadRecord, out *cycleOut) {
	if (r.State == StateAdmitted || r.State == StateEvicting) && l.closing[r.ClusterQueue] != "" {
		out.released = true
	}
}

func (l *Loop) leaveCore(r *WorkloadRecord) {
	if r.State == StateFinished {
		return
	}
	if l.outside[r.ID] {
		delete(l.outside, r.ID)
		return
	}
	if err := l.core.Remove(r.ID); err != nil {
		l.log.Warn("admission loop: remove", "task_id", r.ID, "err", err)
	}
}

// applyDecision applies one decision of the core and records it.
func (l *Loop) applyDecision(d Decision, now time.Time, out *cycleOut) {
	switch d.Kind {
	case DecisionAdmit:
		r := l.work[d.Workload]
		if r == nil {
			return
		}
		if err := l.core.Admit(d.Workload, d.Flavors); err != nil {
			// The core's own decision no longer fits: a bug in the core,
			// or a state change in this cycle it did not see. Skip it;
			// the next cycle decides again.
			l.log.Error("admission loop: admit", "task_id", d.Workload, "err", err)
			return
		}
		r.State, r.Flavors, r.Borrowing, r.AdmittedAt = StateAdmitted, d.Flavors, d.Borrowing, now
		out.decided[[2]string{r.ClusterQueue, "admit"}]++
		out.admitted = append(out.admitted, Admission{TaskID: r.ID, ClusterQueue: r.ClusterQueue, Flavors: d.Flavors,
			TaskVersion: r.TaskVersion})
		out.record(r, now, &quotav1.WorkloadAdmitted{TaskId: r.ID, ClusterQueue: r.ClusterQueue, Flavors: d.Flavors,
			Borrowing: d.Borrowing, TaskVersion: r.TaskVersion})
	case DecisionPreempt:
		v := l.work[d.Victim]
		if v == nil {
			return
		}
		if err := l.core.Preempt(d.Victim, d.Workload); err != nil {
			l.log.Error("admission loop: preempt", "task_id", d.Victim, "err", err)
			return
		}
		v.State, v.Preemptor = StateEvicting, d.Workload
		out.decided[[2]string{v.ClusterQueue, "preempt"}]++
		out.record(v, now, &quotav1.WorkloadPreemptionRequested{TaskId: v.ID, PreemptorTaskId: d.Workload,
			Reason: d.Reason, TaskVersion: v.TaskVersion})
	}
}

// explain returns the live explanation of a workload; ok is false when
// this instance does not hold the state, known is false when the workload
// is not live (it may be finished, in the database).
func (l *Loop) explain(id string) (rec WorkloadRecord, ex Explanation, known, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.core == nil {
		return WorkloadRecord{}, Explanation{}, false, false
	}
	r := l.work[id]
	if r == nil {
		return WorkloadRecord{}, Explanation{}, false, true
	}
	rec = *r
	switch {
	case l.outside[id]:
		ex = Explanation{ClusterQueue: r.ClusterQueue, State: StatePending, Reason: r.Reason}
	default:
		var err error
		if ex, err = l.core.Explain(id); err != nil {
			ex = Explanation{ClusterQueue: r.ClusterQueue, State: r.State, Reason: err.Error()}
		}
	}
	return rec, ex, true, true
}

// tenantsOf returns the tenant of each of ids the loop holds ("" for one
// it does not).
func (l *Loop) tenantsOf(ids []string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		if r := l.work[id]; r != nil {
			out[id] = r.TenantID
		}
	}
	return out
}

// Usage is the live usage of the queues and cohorts, and the number of
// pending and admitted workloads per queue.
type Usage struct {
	Queues            map[string][]*quotav1.FlavorUsage
	Cohorts           map[string][]*quotav1.FlavorUsage
	Pending, Admitted map[string]int
}

// usage reads the live usage of the named queues and cohorts.
func (l *Loop) usage(queues, cohorts []string) (Usage, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.core == nil {
		return Usage{}, false
	}
	u := Usage{Queues: map[string][]*quotav1.FlavorUsage{}, Cohorts: map[string][]*quotav1.FlavorUsage{},
		Pending: map[string]int{}, Admitted: map[string]int{}}
	for _, q := range queues {
		if f, err := l.core.ClusterQueueUsage(q); err == nil {
			u.Queues[q] = f
		}
	}
	for _, c := range cohorts {
		if f, err := l.core.CohortUsage(c); err == nil {
			u.Cohorts[c] = f
		}
	}
	for _, r := range l.work {
		switch r.State {
		case StatePending:
			u.Pending[r.ClusterQueue]++
		case StateAdmitted, StateEvicting:
			u.Admitted[r.ClusterQueue]++
		}
	}
	return u, true
}
