package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/eventstore"
)

// loopStore is a LoopStore in memory: what a cycle writes is staged and
// kept only when its function returns nil, as a transaction's writes are.
// It records the sessions it ran and the events it kept.
type loopStore struct {
	mu        sync.Mutex
	defs      Definitions
	gen       int64
	workloads map[string]WorkloadRecord
	versions  map[string]int64 // task id → last fact version seen (StartCycle)
	events    []eventstore.Event
	sessions  int
	// failSaves fails that many SaveCycle calls, the next first.
	failSaves int
	// lost makes Alive fail: the lock's connection broke.
	lost bool
}

func newLoopStore(defs Definitions) *loopStore {
	return &loopStore{defs: defs, gen: 1, workloads: map[string]WorkloadRecord{}, versions: map[string]int64{}}
}

func (s *loopStore) Lead(ctx context.Context, retry time.Duration, _ *slog.Logger, session func(context.Context, LoopSession) error) error {
	for ctx.Err() == nil {
		s.mu.Lock()
		s.sessions++
		s.lost = false // a new session holds the lock afresh
		s.mu.Unlock()
		_ = session(ctx, loopSessionOf{s})
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
	return nil
}

func (s *loopStore) eventTypes(aggregate string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		if e.AggregateID == aggregate {
			out = append(out, e.Type)
		}
	}
	return out
}

func (s *loopStore) sessionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions
}

type loopSessionOf struct{ s *loopStore }

func (l loopSessionOf) Alive(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.lost {
		return errors.New("lock lost")
	}
	return nil
}

func (l loopSessionOf) Waiting(context.Context, int64) (int64, bool, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.gen, false, nil
}

func (l loopSessionOf) Rebuild(_ context.Context, fn func(LoopTx) error) error { return l.run(fn) }
func (l loopSessionOf) Cycle(_ context.Context, fn func(LoopTx) error) error   { return l.run(fn) }

func (l loopSessionOf) run(fn func(LoopTx) error) error {
	tx := &loopTxOf{s: l.s, versions: map[string]int64{}, workloads: map[string]WorkloadRecord{}}
	if err := fn(tx); err != nil {
		return err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	for id, v := range tx.versions {
		l.s.versions[id] = v
	}
	for id, r := range tx.workloads {
		l.s.workloads[id] = r
	}
	for _, id := range tx.removed {
		delete(l.s.workloads, id)
	}
	l.s.events = append(l.s.events, tx.events...)
	return nil
}

// loopTxOf stages one transaction's writes.
type loopTxOf struct {
	s         *loopStore
	versions  map[string]int64
	workloads map[string]WorkloadRecord
	removed   []string
	events    []eventstore.Event
}

func (t *loopTxOf) DefinitionsGeneration() (int64, error) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.s.gen, nil
}

func (t *loopTxOf) LoadDefinitions() (Definitions, error) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.s.defs, nil
}

func (t *loopTxOf) LoadWorkloads() ([]WorkloadRecord, error) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	var out []WorkloadRecord
	for _, r := range t.s.workloads {
		if r.State != StateFinished {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// StartCycle has no recorded facts (everything comes directly); a direct
// fact is new when its version is above the one seen for its task.
func (t *loopTxOf) StartCycle(_ int64, _ int, direct []Fact) (CycleStart, error) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	cs := CycleStart{Generation: t.s.gen}
	for _, f := range direct {
		if f.TaskVersion > t.s.versions[f.TaskID] {
			t.versions[f.TaskID] = f.TaskVersion
			cs.Direct = append(cs.Direct, f)
		}
	}
	return cs, nil
}

func (t *loopTxOf) SaveCycle(events []eventstore.Event, changed []*WorkloadRecord, removed []string, _ []Fact) error {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if t.s.failSaves > 0 {
		t.s.failSaves--
		return errors.New("connection reset")
	}
	t.events = append(t.events, events...)
	for _, r := range changed {
		t.workloads[r.ID] = *r
	}
	t.removed = append(t.removed, removed...)
	return nil
}

// gpuCore is a Core of ClusterQueues that each admit up to their nominal
// GPU quota, in arrival order: enough of Kueue to see the loop record,
// restore and forget its decisions.
type gpuCore struct {
	quota    map[string]int64 // by ClusterQueue, milli-GPUs
	used     map[string]int64
	pending  []Workload
	admitted map[string]Workload
}

func newGPUCore(defs Definitions) (Core, error) {
	c := &gpuCore{admitted: map[string]Workload{}}
	return c, c.Reconfigure(defs)
}

func (c *gpuCore) Reconfigure(defs Definitions) error {
	c.quota, c.used = map[string]int64{}, map[string]int64{}
	for name, spec := range defs.ClusterQueues {
		for _, g := range spec.GetResourceGroups() {
			for _, f := range g.GetFlavors() {
				for _, r := range f.GetResources() {
					if r.GetName() == GPUResource {
						var n int64
						if _, err := fmt.Sscan(r.GetNominalQuota(), &n); err != nil {
							return err
						}
						c.quota[name] += n * 1000
					}
				}
			}
		}
	}
	for _, w := range c.admitted {
		c.used[w.ClusterQueue] += w.Requests[GPUResource]
	}
	return nil
}

func (c *gpuCore) Enqueue(w Workload) error {
	if _, ok := c.quota[w.ClusterQueue]; !ok {
		return fmt.Errorf("no ClusterQueue %q", w.ClusterQueue)
	}
	c.pending = append(c.pending, w)
	return nil
}

func (c *gpuCore) Admit(id string, _ map[string]string) error {
	i := slices.IndexFunc(c.pending, func(w Workload) bool { return w.ID == id })
	if i < 0 {
		return fmt.Errorf("%s is not pending", id)
	}
	w := c.pending[i]
	if c.used[w.ClusterQueue]+w.Requests[GPUResource] > c.quota[w.ClusterQueue] {
		return fmt.Errorf("%s does not fit", id)
	}
	c.pending = slices.Delete(c.pending, i, i+1)
	c.admitted[id] = w
	c.used[w.ClusterQueue] += w.Requests[GPUResource]
	return nil
}

func (c *gpuCore) Preempt(string, string) error { return errors.New("gpuCore does not preempt") }

func (c *gpuCore) Remove(id string) error {
	if w, ok := c.admitted[id]; ok {
		delete(c.admitted, id)
		c.used[w.ClusterQueue] -= w.Requests[GPUResource]
		return nil
	}
	c.pending = slices.DeleteFunc(c.pending, func(w Workload) bool { return w.ID == id })
	return nil
}

func (c *gpuCore) Schedule(_ time.Time, max int) []Decision {
	var out []Decision
	used := map[string]int64{}
	for q, n := range c.used {
		used[q] = n
	}
	for _, w := range c.pending {
		if len(out) == max {
			break
		}
		if used[w.ClusterQueue]+w.Requests[GPUResource] <= c.quota[w.ClusterQueue] {
			used[w.ClusterQueue] += w.Requests[GPUResource]
			out = append(out, Decision{Kind: DecisionAdmit, Workload: w.ID, Flavors: map[string]string{GPUResource: "a100"}})
		}
	}
	return out
}

func (c *gpuCore) Explain(string) (Explanation, error)                      { return Explanation{}, nil }
func (c *gpuCore) ClusterQueueUsage(string) ([]*quotav1.FlavorUsage, error) { return nil, nil }
func (c *gpuCore) CohortUsage(string) ([]*quotav1.FlavorUsage, error)       { return nil, nil }

// gpuDefs is one ClusterQueue "cq" with gpus GPUs.
func gpuDefs(gpus string) Definitions {
	return Definitions{ClusterQueues: map[string]*quotav1.ClusterQueueSpec{"cq": gpuQueue("", gpus)}}
}

// startLoop runs a loop over store until the test ends and waits for its
// first session to take offers.
func startLoop(t *testing.T, store *loopStore) *Loop {
	t.Helper()
	l := NewLoop(store, newGPUCore, time.Now, slog.New(slog.DiscardHandler), LoopConfig{Tick: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitActive(t, l)
	return l
}

// waitActive waits until the loop takes offers (Sync answers).
func waitActive(t *testing.T, l *Loop) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := l.Sync(context.Background())
		if err == nil {
			return
		}
		if !errors.Is(err, ErrNotActive) || time.Now().After(deadline) {
			t.Fatalf("the loop never became active: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

func gpuStay(task string, version int64, gpus string) Fact {
	return QueueFact(task, version, "tenant-a", "cq", 5, time.Unix(1_700_000_000, 0), map[string]string{GPUResource: gpus})
}

func TestLoopRecordsTheAdmissionItAnswers(t *testing.T) {
	store := newLoopStore(gpuDefs("1"))
	l := startLoop(t, store)
	ctx := context.Background()

	res, err := l.Queue(ctx, gpuStay("t1", 1, "1"))
	if err != nil || !res.Admitted || res.ClusterQueue != "cq" || res.TaskVersion != 1 {
		t.Fatalf("Queue t1 = %+v, %v; want admitted to cq at version 1", res, err)
	}
	// The queue is full: t2 waits, answered not admitted once the loop is idle.
	res, err = l.Queue(ctx, gpuStay("t2", 1, "1"))
	if err != nil || res.Admitted {
		t.Fatalf("Queue t2 = %+v, %v; want not admitted (no GPU left)", res, err)
	}
	// t1's end frees its GPU, and the cycle that applies it admits t2.
	admitted, err := l.Finish(ctx, FinishFact("t1", 3, "tenant-a", "succeeded"))
	if err != nil || len(admitted) != 1 || admitted[0].TaskID != "t2" {
		t.Fatalf("Finish t1 = %+v, %v; want t2 admitted", admitted, err)
	}
	wantStrings(t, "t1's events", store.eventTypes("workload/t1"), "WorkloadQueued", "WorkloadAdmitted", "WorkloadFinished")
	wantStrings(t, "t2's events", store.eventTypes("workload/t2"), "WorkloadQueued", "WorkloadAdmitted")
	// The same stay again (it came through the task topic too) changes nothing.
	if _, err := l.Queue(ctx, gpuStay("t2", 1, "1")); err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "t2's events after the repeat", store.eventTypes("workload/t2"), "WorkloadQueued", "WorkloadAdmitted")
}

// A cycle whose write fails records nothing, and the core's decision made
// in it does not outlive it: the session ends, the next one rebuilds the
// core from what was recorded, and the stay offered again is decided once.
func TestLoopForgetsTheDecisionsOfACycleThatFailed(t *testing.T) {
	store := newLoopStore(gpuDefs("1"))
	store.failSaves = 1
	l := startLoop(t, store)
	ctx := context.Background()

	if res, err := l.Queue(ctx, gpuStay("t1", 1, "1")); err == nil {
		t.Fatalf("Queue with a failing write = %+v, nil; want the cycle's error", res)
	}
	if got := store.eventTypes("workload/t1"); len(got) != 0 {
		t.Fatalf("a failed cycle recorded %v", got)
	}
	waitActive(t, l)
	if n := store.sessionCount(); n != 2 {
		t.Fatalf("%d sessions; want the failed one and the one after it", n)
	}
	// Had the core kept the failed cycle's admission, its GPU would be
	// taken and t1 would wait; rebuilt from the records, it fits.
	res, err := l.Queue(ctx, gpuStay("t1", 1, "1"))
	if err != nil || !res.Admitted {
		t.Fatalf("Queue t1 again = %+v, %v; want admitted", res, err)
	}
	wantStrings(t, "t1's events", store.eventTypes("workload/t1"), "WorkloadQueued", "WorkloadAdmitted")
}

// A new session starts from the recorded admissions: quota held before it
// stays held.
func TestLoopRestoresRecordedAdmissionsAfterLosingTheLock(t *testing.T) {
	store := newLoopStore(gpuDefs("1"))
	l := startLoop(t, store)
	ctx := context.Background()
	if res, err := l.Queue(ctx, gpuStay("t1", 1, "1")); err != nil || !res.Admitted {
		t.Fatalf("Queue t1 = %+v, %v; want admitted", res, err)
	}

	store.mu.Lock()
	store.lost = true
	store.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for store.sessionCount() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the session went on after its lock was lost")
		}
		time.Sleep(time.Millisecond)
	}
	waitActive(t, l)

	res, err := l.Queue(ctx, gpuStay("t2", 1, "1"))
	if err != nil || res.Admitted {
		t.Fatalf("Queue t2 = %+v, %v; want it to wait behind t1's restored admission", res, err)
	}
	wantStrings(t, "t2's events", store.eventTypes("workload/t2"), "WorkloadQueued")
}

func TestLoopRefusesOffersWithoutASession(t *testing.T) {
	l := NewLoop(newLoopStore(gpuDefs("1")), newGPUCore, time.Now, slog.New(slog.DiscardHandler), LoopConfig{})
	ctx := context.Background()
	if _, err := l.Queue(ctx, gpuStay("t1", 1, "1")); !errors.Is(err, ErrNotActive) {
		t.Errorf("Queue = %v; want ErrNotActive", err)
	}
	if _, err := l.Finish(ctx, FinishFact("t1", 2, "tenant-a", "succeeded")); !errors.Is(err, ErrNotActive) {
		t.Errorf("Finish = %v; want ErrNotActive", err)
	}
	if err := l.Sync(ctx); !errors.Is(err, ErrNotActive) {
		t.Errorf("Sync = %v; want ErrNotActive", err)
	}
}
