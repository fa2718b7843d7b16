package admission_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/quota/admission"
)

// soloQueue defines a ClusterQueue of gpus GPUs outside any cohort.
func (e *env) soloQueue(name, gpus string) {
	e.t.Helper()
	_, err := e.client().PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: name, Spec: &quotav1.ClusterQueueSpec{
		ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{"nvidia.com/gpu"},
			Flavors: []*quotav1.FlavorQuotas{{Name: "a100", Resources: []*quotav1.ResourceQuota{{Name: "nvidia.com/gpu", NominalQuota: gpus}}}}}}}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// admittedGPUs sums the GPUs (milli) admitted in a queue, as recorded.
func (e *env) admittedGPUs(queue string) (milli int64, n int) {
	e.t.Helper()
	err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum((requests->>'nvidia.com/gpu')::bigint), 0), count(*)
		FROM workloads WHERE cluster_queue = $1 AND state IN ('admitted', 'evicting')`, queue).Scan(&milli, &n)
	if err != nil {
		e.t.Fatal(err)
	}
	return milli, n
}

// Many submitters at once, two active-candidate instances on one
// database, capacity freed while tasks arrive: the recorded admissions
// never exceed the queue's quota, and every task is admitted in the end.
func TestNoOverAdmissionUnderConcurrentSubmitters(t *testing.T) {
	e := newEnv(t)
	_, _, stopSecond := e.instance(e.open()) // competes for the loop's lock
	defer stopSecond()
	e.soloQueue("solo", "4")

	const submitters, each = 8, 15
	var over atomic.Int64
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if m, _ := e.admittedGPUs("solo"); m > 4000 {
				over.Store(m)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	tasks := make([][]*task, submitters)
	for s := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tk := &task{id: fmt.Sprintf("s%d-%d", s, i), tenant: "t", queue: "solo", priority: 5, gpus: "1"}
				tasks[s] = append(tasks[s], tk)
				e.submit(tk)
			}
		}()
	}
	wg.Wait()
	// Free capacity steadily until everything ran.
	all := map[string]*task{}
	for _, ts := range tasks {
		for _, tk := range ts {
			all[tk.id] = tk
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(all) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks never admitted", len(all))
		}
		for id, tk := range all {
			if st, _ := e.state(id); st == "admitted" {
				e.publish(tk, &taskv1.TaskSucceeded{AttemptId: "a"})
				delete(all, id)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(done)
	sampler.Wait()
	if m := over.Load(); m != 0 {
		t.Fatalf("admitted %dm GPUs in a 4 GPU queue", m)
	}
}

// A new instance on the same database rebuilds the same admitted set and
// carries on: freed capacity goes to the next pending workload.
func TestRestartKeepsAdmissionsAndContinues(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "2")
	ts := make([]*task, 4)
	for i := range ts {
		ts[i] = &task{id: fmt.Sprintf("r%d", i), tenant: "t", queue: "solo", priority: int32(2 + i), gpus: "1"}
		e.submit(ts[i])
	}
	e.waitState("r0", "admitted", 1)
	e.waitState("r1", "admitted", 1)
	e.waitState("r2", "pending", 1)
	e.waitState("r3", "pending", 1)

	e.start() // stops the first instance, starts a new one
	resp, err := e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "solo"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		resp, err = e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "solo"})
		return err == nil && resp.ClusterQueue.AdmittedWorkloads == 2
	})
	if q := resp.ClusterQueue; q.PendingWorkloads != 2 || q.FlavorsUsage[0].Resources[0].Total != "2" {
		t.Fatalf("after restart: %v", resp)
	}
	e.publish(ts[0], &taskv1.TaskSucceeded{AttemptId: "a"})
	e.waitState("r2", "admitted", 1) // next by priority
	if st, _ := e.state("r3"); st != "pending" {
		t.Fatalf("r3 is %s", st)
	}
	if m, n := e.admittedGPUs("solo"); m != 2000 || n != 2 {
		t.Fatalf("admitted %dm GPUs in %d workloads, want 2 in 2", m, n)
	}
}

// Redelivered task events (same versions) record nothing twice; a
// deleted task's workload is forgotten.
func TestTaskEventsAreIdempotent(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "1")
	a := &task{id: "dup", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	e.submit(a)
	a.version = 0
	e.submit(a) // the same version 1 again
	e.waitState("dup", "admitted", 1)
	e.publish(a, &taskv1.TaskSucceeded{AttemptId: "x"}) // v2
	a.version = 1
	e.publish(a, &taskv1.TaskSucceeded{AttemptId: "x"}) // v2 again
	e.waitState("dup", "finished", 1)
	b := &task{id: "other", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	e.submit(b)
	e.waitState("other", "admitted", 1)
	if got := e.events("dup"); len(got) != 3 {
		t.Fatalf("dup events = %v, want queued, admitted, finished once each", got)
	}
	e.publish(a, &taskv1.TaskDeleted{}) // v3
	waitFor(t, func() bool { st, _ := e.state("dup"); return st == "" })

	// The projection, rebuilt from offset 0, equals the live one (the
	// duplicates included).
	for _, spec := range admission.ReplaySpecs(e.broker.Config()) {
		rep, err := projection.Replay(context.Background(), e.pool, spec)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Equal() || rep.Tables[0].LiveRows != 2 {
			t.Errorf("replay of %s = %+v", spec.Name, rep)
		}
	}
}

// The loop holds only live workloads; a finished one is read back from
// the records when a fact names its task. A retry after other cycles ran
// starts its next stay with the known spec and continues the aggregate's
// history, a restart in between changes nothing, and explaining a
// finished workload reads its record, to its tenant only.
func TestFinishedWorkloadsComeBackFromTheRecords(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "1")
	a := &task{id: "again", tenant: "t1", queue: "solo", priority: 5, gpus: "1"}
	e.submit(a) // v1
	e.waitState("again", "admitted", 1)
	e.publish(a, &taskv1.TaskFailed{AttemptId: "x"}) // v2
	e.waitState("again", "finished", 1)
	b := &task{id: "between", tenant: "t1", queue: "solo", priority: 5, gpus: "1"}
	e.submit(b) // a cycle that does not name "again"
	e.waitState("between", "admitted", 1)

	c := e.client()
	ex, err := c.ExplainTaskAdmission(user("t1", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "again"})
	if err != nil || ex.State != "finished" || ex.ClusterQueue != "solo" || ex.Reason != "failed" {
		t.Fatalf("explain a finished workload = %v, %v", ex, err)
	}
	if _, err := c.ExplainTaskAdmission(user("t2", "standard"), &quotav1.ExplainTaskAdmissionRequest{TaskId: "again"}); code(err) != codes.NotFound {
		t.Fatalf("another tenant's finished workload: %v", err)
	}

	e.publish(a, &taskv1.TaskRetryScheduled{}) // v3: the known spec, waiting behind "between"
	e.waitState("again", "pending", 3)
	e.publish(b, &taskv1.TaskSucceeded{AttemptId: "y"})
	e.waitState("again", "admitted", 3)
	if m, n := e.admittedGPUs("solo"); m != 1000 || n != 1 {
		t.Fatalf("admitted %dm GPUs in %d workloads, want 1 in 1", m, n)
	}

	e.publish(a, &taskv1.TaskSucceeded{AttemptId: "z"}) // v4
	e.waitState("again", "finished", 3)
	// A new session loads only the live workloads.
	e.start()
	e.publish(a, &taskv1.TaskRequeued{Reason: "resumed"}) // v5
	e.waitState("again", "admitted", 5)
	want := []string{"WorkloadQueued", "WorkloadAdmitted", "WorkloadFinished", "WorkloadQueued", "WorkloadAdmitted",
		"WorkloadFinished", "WorkloadQueued", "WorkloadAdmitted"}
	if got := e.events("again"); !slices.Equal(got, want) {
		t.Fatalf("events of again = %v, want %v", got, want)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every lock holder (the admission loop, the relay, the task projection)
// loses its connection mid-flight: new sessions rebuild from what was
// committed and carry on, with no admission lost, repeated or over quota.
func TestLoopSurvivesLosingItsConnection(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "2")
	ts := make([]*task, 6)
	for i := range ts {
		ts[i] = &task{id: fmt.Sprintf("k%d", i), tenant: "t", queue: "solo", priority: 5, gpus: "1"}
		e.submit(ts[i])
	}
	e.waitState("k0", "admitted", 1)
	e.waitState("k1", "admitted", 1)
	var killed int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()`).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminated %d lock holders: %v", killed, err)
	}
	for i, tk := range ts {
		e.waitState(tk.id, "admitted", 1)
		e.publish(tk, &taskv1.TaskSucceeded{AttemptId: "a"})
		if m, n := e.admittedGPUs("solo"); m > 2000 {
			t.Fatalf("after %d ends: %dm GPUs in %d workloads admitted", i, m, n)
		}
	}
	for _, tk := range ts {
		e.waitState(tk.id, "finished", 1)
		if got := e.events(tk.id); len(got) != 3 {
			t.Fatalf("%s events = %v", tk.id, got)
		}
	}
}

// Recorded admissions survive a restart after their queue's quota shrank
// below them: nothing is admitted until usage is under the new quota.
func TestRestartAfterQuotaShrank(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "2")
	ts := make([]*task, 3)
	for i := range ts {
		ts[i] = &task{id: fmt.Sprintf("s%d", i), tenant: "t", queue: "solo", priority: int32(2 + i), gpus: "1"}
		e.submit(ts[i])
	}
	e.waitState("s0", "admitted", 1)
	e.waitState("s1", "admitted", 1)
	e.waitState("s2", "pending", 1)
	e.soloQueue("solo", "1")
	e.start()
	waitFor(t, func() bool {
		r, err := e.client().GetClusterQueue(admin(), &quotav1.GetClusterQueueRequest{Name: "solo"})
		return err == nil && r.ClusterQueue.AdmittedWorkloads == 2 && r.ClusterQueue.PendingWorkloads == 1
	})
	e.publish(ts[0], &taskv1.TaskSucceeded{AttemptId: "a"})
	e.waitState("s0", "finished", 1)
	time.Sleep(200 * time.Millisecond) // several cycles
	if st, _ := e.state("s2"); st != "pending" {
		t.Fatalf("s2 is %s while the queue is at its new quota", st)
	}
	e.publish(ts[1], &taskv1.TaskSucceeded{AttemptId: "a"})
	e.waitState("s2", "admitted", 1)
	// s1 was admitted once, never again after the restart.
	if got, want := e.events("s1"), []string{"WorkloadQueued", "WorkloadAdmitted", "WorkloadFinished"}; !slices.Equal(got, want) {
		t.Fatalf("s1 events = %v, want %v", got, want)
	}
}

// Shrinking a queue's nominal quota below what it holds evicts nothing
// (as in Kueue; docs/api/quota.md#changing-a-queues-quota): its admitted
// work runs on, the answer shows the excess as borrowed, and new work
// waits until the queue's usage leaves room under the new quota.
func TestShrinkingAQueueBelowItsUsageEvictsNothing(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	for name, gpus := range map[string]string{"qa": "4", "qb": "2"} {
		if _, err := c.PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: name, Spec: gpuQueue("co", gpus)}); err != nil {
			t.Fatal(err)
		}
	}
	var held []*task
	for i := range 6 {
		q := "qa"
		if i >= 4 {
			q = "qb"
		}
		tk := &task{id: fmt.Sprintf("%s-%d", q, i), tenant: "t", queue: q, priority: 5, gpus: "1"}
		e.submit(tk)
		e.waitState(tk.id, "admitted", 1)
		held = append(held, tk)
	}
	next := &task{id: "qa-next", tenant: "t", queue: "qa", priority: 5, gpus: "1"}
	e.submit(next)
	e.waitState("qa-next", "pending", 1)

	r, err := c.PutClusterQueue(admin(), &quotav1.PutClusterQueueRequest{Name: "qa", Spec: gpuQueue("co", "2")})
	if err != nil {
		t.Fatal(err)
	}
	u := r.ClusterQueue.GetFlavorsUsage()[0].GetResources()[0]
	if u.GetTotal() != "4" || u.GetNominalQuota() != "2" || u.GetBorrowed() != "2" || u.GetAvailable() != "0" {
		t.Fatalf("shrunk queue's usage = %v, want total 4, nominal 2, borrowed 2, available 0", u)
	}
	time.Sleep(200 * time.Millisecond) // several cycles
	// Over its quota the queue has nothing available, not less, in the
	// explanation as in the queue's usage.
	ex, err := c.ExplainTaskAdmission(admin(), &quotav1.ExplainTaskAdmissionRequest{TaskId: "qa-next"})
	if err != nil || len(ex.GetShortages()) != 1 || ex.GetShortages()[0].GetAvailable() != "0" || !strings.Contains(ex.GetReason(), "available 0 ") {
		t.Fatalf("explain qa-next in the shrunk queue = %v, %v", ex, err)
	}
	for _, tk := range held {
		if got, want := e.events(tk.id), []string{"WorkloadQueued", "WorkloadAdmitted"}; !slices.Equal(got, want) {
			t.Fatalf("%s events = %v, want %v: nothing evicted", tk.id, got, want)
		}
	}
	// Two end: qa holds 2, its new quota, and the cohort has nothing to
	// lend: what waits still waits.
	for _, tk := range held[:2] {
		e.publish(tk, &taskv1.TaskSucceeded{AttemptId: "a"})
		e.waitState(tk.id, "finished", 1)
	}
	time.Sleep(200 * time.Millisecond)
	if st, _ := e.state("qa-next"); st != "pending" {
		t.Fatalf("qa-next is %s while qa is at its new quota", st)
	}
	// One more ends: there is room under the new quota.
	e.publish(held[2], &taskv1.TaskSucceeded{AttemptId: "a"})
	e.waitState("qa-next", "admitted", 1)
}

// A loop with nothing to do opens no transaction: its cycles (one per
// tick here, 20 ms) take no transaction id, so none of them waits for a
// WAL flush at commit, and a stay handed over meanwhile does not wait
// for one either. It still admits what arrives.
func TestAnIdleLoopTakesNoTransactionID(t *testing.T) {
	e := newEnv(t)
	e.soloQueue("solo", "2")
	first := &task{id: "first", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	e.submit(first)
	e.waitState("first", "admitted", 1)
	nextXID := func() string {
		t.Helper()
		var xid string
		if err := e.pool.QueryRow(context.Background(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		return xid
	}
	// Settle: the relay publishes the admission and records how far it
	// got, at most five times a second and so up to about a quarter of a
	// second after its last publish (outbox, checkpointEvery): settled
	// once no id was taken for longer than that.
	settled := nextXID()
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(600 * time.Millisecond)
		now := nextXID()
		if now == settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("transactions kept taking ids for 10 s (next id %s)", now)
		}
		settled = now
	}
	time.Sleep(300 * time.Millisecond) // about 15 idle cycles
	if after := nextXID(); after != settled {
		t.Errorf("the next transaction id moved from %s to %s while the loop was idle", settled, after)
	}
	second := &task{id: "second", tenant: "t", queue: "solo", priority: 5, gpus: "1"}
	e.submit(second)
	e.waitState("second", "admitted", 1)
}
